"""Developer checks of the harness itself on a GPU (not part of a run).

    python -m tools.crosscheck dobench RUN_DIR     medians against triton.testing.do_bench
    python -m tools.crosscheck repeat RUN_A RUN_B  per-(config, implementation) median drift

`dobench` re-creates each config's timing inputs and asks triton's do_bench (256 MB zeroed
before every timed call, CUDA events per call) for the median, under the harness's
conditions, so that a difference means a timer defect and not a different experiment:

- Duty cycle. do_bench's calls run back to back; the harness's are separated by its spin
  and a synchronize. Measured on an H100 (2026-11-22): back-to-back cuDNN SDPA at
  ~600 TFLOP/s hits the 700 W software power cap (NVML clock-event reason 0x4) and the SM
  clock falls from 1980 to 1710-1770 MHz, so plain do_bench read 4-7% slower than the
  harness there, and 4% apart between two do_bench calls of one row. Here the harness's
  spin is enqueued before each timed call through do_bench's per-call `grad_to_none` hook
  (outside its events), and the GPU first settles at that duty cycle with the harness's
  own calls (timing.settle), as a run does before its samples; do_bench's own back-to-back
  warmup is cut to one call so that it does not undo the settling.
- Graph mode. do_bench_cudagraph replays thousands of calls with no L2 flush; the harness
  flushes before each replay of a `calls`-long batch (only the first call starts cold).
  Measured: that flush alone is +3-5% at S=128. Here do_bench times a replay of the
  harness's own batch, flushing before each, divided by `calls`.

The plain do_bench median is reported beside it (`plain_ms`) for the record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial
from pathlib import Path

SETTLE_SECONDS = 0.25
# do_bench's own median moves: measured on an H100, cuDNN SDPA at (4,16,1024,64) read 47.5-48.3 µs
# over four processes (the harness 46.8-47.0), so the yardstick is the median of several.
MATCHED_REPEATS = 3
YARDSTICK_CAPTURES = 8


def _summary(run_dir: Path) -> list:
    from benches.writers import read_csv
    from results_schema import SummaryRow

    return read_csv(run_dir / "results" / "summary.csv", SummaryRow)


def _graph_calls(run_dir: Path) -> dict[tuple[str, str], int]:
    from benches.writers import read_csv
    from results_schema import Measurement

    rows = read_csv(run_dir / "results" / "measurements.csv", Measurement)
    return {(m.config, m.implementation): m.calls for m in rows if m.mode == "graph"}


class SpinBeforeEachCall:
    """do_bench sets `.grad = None` on each grad_to_none item before every timed call, outside
    its events; this item enqueues the harness's spin there instead."""

    def __init__(self, cover_us: float) -> None:
        from benches import timing

        self._cycles = int(cover_us * timing.COVER_CYCLES_PER_US)

    @property
    def grad(self) -> None:
        return None

    @grad.setter
    def grad(self, value: object) -> None:
        import torch

        torch.cuda._sleep(self._cycles)


def matched_do_bench(fns: list, clock, calls: int | None) -> tuple[float, float]:
    """(matched, plain) do_bench medians in ms per call, the call rotating over `fns` (one
    per input placement, as the harness rotates); `calls` set means graph mode."""
    import numpy as np
    import triton.testing

    from benches import timing

    if calls:
        # The harness's median spans plan.placements x GRAPH_CAPTURES captures, which differ
        # by 2-3% (timing's docstring): the yardstick rotates over as many as it can afford.
        timed = timing.GraphBatch(
            [timing.capture(fns[i % len(fns)], calls) for i in range(YARDSTICK_CAPTURES)]
        )
    else:
        outputs = timing.OutputRing()
        timed = timing.cycling([outputs.keep(fn) for fn in fns])
    per_call = calls or 1
    plain = triton.testing.do_bench(timed, warmup=25, rep=100, return_mode="median") / per_call
    matched = []
    for _ in range(MATCHED_REPEATS):
        # The run before ran back to back; settle again at the harness's duty cycle.
        timing.settle(
            {"fn": partial(clock.time_call, timed)}, SETTLE_SECONDS, np.random.default_rng(0)
        )
        matched.append(
            triton.testing.do_bench(
                timed,
                warmup=0,
                rep=100,
                grad_to_none=[SpinBeforeEachCall(clock.cover_us())],
                return_mode="median",
            )
        )
    return statistics.median(matched) / per_call, plain


def _plan(run_dir: Path, plan_spec: str | None):
    """The run's plan.json, else (a fetched run keeps none) the plan named on the command
    line: only its configs and seed matter here, which the name fixes."""
    from benches.plan import resolve_plan
    from results_schema import Plan

    path = run_dir / "plan.json"
    if path.is_file():
        return Plan.model_validate_json(path.read_text())
    if plan_spec is None:
        raise SystemExit(f"{path} is missing: name the run's plan with --plan")
    return resolve_plan(plan_spec)


def dobench(run_dir: Path, plan_spec: str | None = None) -> dict:
    import torch

    from benches import registry, timing
    from benches.correctness import config_seed, make_inputs
    from results_schema.models import implementation_of

    plan = _plan(run_dir, plan_spec)
    index = {c.name: i for i, c in enumerate(plan.configs)}
    graph_calls = _graph_calls(run_dir)
    device = torch.device("cuda")
    clock = timing.CudaClock(device, flush_l2=True)
    rows = []
    for s in _summary(run_dir):
        i = index[s.config]
        config = plan.configs[i]
        inputs = make_inputs(config, device, config_seed(plan.seed, i, "timing"))
        run = registry.get(implementation_of(s.implementation)).run
        fns = [partial(run, *qkv, config.causal) for qkv in timing.input_copies(inputs)]
        calls = graph_calls.get((s.config, s.implementation)) if s.mode == "graph" else None
        theirs, plain = matched_do_bench(fns, clock, calls)
        diff = (s.median_ms - theirs) / theirs
        rows.append(
            {
                "config": s.config,
                "implementation": s.implementation,
                "mode": s.mode,
                "harness_ms": s.median_ms,
                "triton_ms": theirs,
                "plain_ms": plain,
                "diff": diff,
                "plain_diff": (s.median_ms - plain) / plain,
            }
        )
        print(
            f"{s.config:26} {s.implementation:15} {s.mode:6} harness {s.median_ms:.5f} "
            f"triton {theirs:.5f} ms  {100 * diff:+6.2f}%   (plain do_bench {plain:.5f} ms "
            f"{100 * rows[-1]['plain_diff']:+6.2f}%)"
        )
    worst = max(rows, key=lambda r: abs(r["diff"]))
    single = [r for r in rows if r["mode"] == "single"]
    result = {
        "rows": rows,
        "max_abs_diff": abs(worst["diff"]),
        "max_abs_diff_single": max((abs(r["diff"]) for r in single), default=None),
        "within_3pct": sum(abs(r["diff"]) <= 0.03 for r in rows),
    }
    print(
        f"largest difference: {100 * abs(worst['diff']):.2f}% ({worst['config']}, "
        f"{worst['implementation']}, {worst['mode']}); single-launch rows only: "
        f"{100 * (result['max_abs_diff_single'] or 0):.2f}%; within 3%: "
        f"{result['within_3pct']}/{len(rows)}"
    )
    return result


def repeat(run_a: Path, run_b: Path) -> dict:
    a = {(s.config, s.implementation): s for s in _summary(run_a)}
    b = {(s.config, s.implementation): s for s in _summary(run_b)}
    rows = []
    for key in a.keys() & b.keys():
        diff = (b[key].median_ms - a[key].median_ms) / a[key].median_ms
        rows.append(
            {
                "config": key[0],
                "implementation": key[1],
                "a_ms": a[key].median_ms,
                "b_ms": b[key].median_ms,
                "diff": diff,
            }
        )
    rows.sort(key=lambda r: -abs(r["diff"]))
    for r in rows:
        print(
            f"{r['config']:26} {r['implementation']:15} {r['a_ms']:.5f} {r['b_ms']:.5f} ms "
            f"{100 * r['diff']:+6.2f}%"
        )
    print(
        f"largest back-to-back median difference: {100 * abs(rows[0]['diff']):.2f}% "
        f"({rows[0]['config']}, {rows[0]['implementation']})"
    )
    return {"rows": rows, "max_abs_diff": abs(rows[0]["diff"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.crosscheck", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dobench")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--plan", help="plan name or file, for a run directory without plan.json")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("repeat")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dobench":
        result = dobench(args.run_dir, args.plan)
    else:
        result = repeat(args.run_a, args.run_b)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
