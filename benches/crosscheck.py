"""Developer checks of the harness itself on a GPU (not part of a run).

    python -m benches.crosscheck dobench RUN_DIR     medians against triton.testing.do_bench
    python -m benches.crosscheck repeat RUN_A RUN_B  per-(config, implementation) median drift

`dobench` re-creates each config's timing inputs and asks triton for the median: do_bench
(which zeroes a 256 MB buffer before every call) for single-launch rows,
do_bench_cudagraph for graph-mode rows. Prints a table and the largest difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _summary(run_dir: Path) -> list:
    from benches.writers import read_csv
    from results_schema import SummaryRow

    return read_csv(run_dir / "results" / "summary.csv", SummaryRow)


def dobench(run_dir: Path) -> dict:
    import torch
    import triton.testing

    from benches.correctness import config_seed, make_inputs
    from kernels import registry
    from results_schema import Plan

    plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    index = {c.name: i for i, c in enumerate(plan.configs)}
    rows = []
    for s in _summary(run_dir):
        i = index[s.config]
        config = plan.configs[i]
        q, k, v = make_inputs(config, torch.device("cuda"), config_seed(plan.seed, i, "timing"))
        run = registry.get(s.implementation).run

        def fn(q=q, k=k, v=v, run=run, causal=config.causal):
            return run(q, k, v, causal)

        if s.mode == "graph":
            theirs = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
        else:
            theirs = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        diff = (s.median_ms - theirs) / theirs
        rows.append(
            {
                "config": s.config,
                "implementation": s.implementation,
                "mode": s.mode,
                "harness_ms": s.median_ms,
                "triton_ms": theirs,
                "diff": diff,
            }
        )
        print(
            f"{s.config:26} {s.implementation:15} {s.mode:6} harness {s.median_ms:.5f} "
            f"triton {theirs:.5f} ms  {100 * diff:+6.2f}%"
        )
    worst = max(rows, key=lambda r: abs(r["diff"]))
    single = [r for r in rows if r["mode"] == "single"]
    result = {
        "rows": rows,
        "max_abs_diff": abs(worst["diff"]),
        "max_abs_diff_single": max((abs(r["diff"]) for r in single), default=None),
    }
    print(
        f"largest difference: {100 * abs(worst['diff']):.2f}% ({worst['config']}, "
        f"{worst['implementation']}, {worst['mode']}); single-launch rows only: "
        f"{100 * (result['max_abs_diff_single'] or 0):.2f}%"
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
    parser = argparse.ArgumentParser(prog="python -m benches.crosscheck", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dobench")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", type=Path)
    p = sub.add_parser("repeat")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = dobench(args.run_dir) if args.command == "dobench" else repeat(args.run_a, args.run_b)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
