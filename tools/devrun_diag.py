"""Developer tool (one device call): why the harness's medians and triton's do_bench differ,
and how stable a config's medians are over time. Not part of a run.

    python3 tools/devrun_diag.py --out $OUT/diag.json

Every experiment runs with an NVML poller (SM clock, power, clock-event reasons every 2 ms)
so that a difference in time can be set against a difference in GPU state.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
import triton.testing

from benches import registry, timing
from benches.correctness import config_seed, make_inputs
from benches.plan import resolve_plan
from tools.crosscheck import SpinBeforeEachCall

SINGLE = {  # config -> implementations compared with do_bench in single-launch mode
    "bf16-b16h32s512d64": ("flash", "sdpa"),
    "bf16-b4h16s2048d64-causal": ("flash", "sdpa"),
    "fp16-b4h16s2048d128": ("sdpa", "sdpa-flash"),
    "bf16-b2h16s4096d128": ("sdpa", "sdpa-flash", "flash"),
    "fp16-b1h16s8192d128-causal": ("sdpa", "sdpa-flash", "flash"),
}
GRAPH = ("fp16-b1h1s128d64", "fp16-b1h8s512d64-causal")
STABILITY = "bf16-b16h32s512d64"


class Poller:
    """Background NVML reads; `window()` summarises the reads taken inside it."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self._reads: list[tuple[float, int, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        nvml, h = self._nvml, self._handle
        while not self._stop.is_set():
            self._reads.append(
                (
                    time.perf_counter(),
                    nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
                    nvml.nvmlDeviceGetPowerUsage(h) / 1000,
                    nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                )
            )
            time.sleep(0.002)

    @contextlib.contextmanager
    def window(self, into: dict):
        start = time.perf_counter()
        yield
        end = time.perf_counter()
        reads = [r for r in self._reads if start <= r[0] <= end]
        if reads:
            clocks = [r[1] for r in reads]
            reasons = 0
            for r in reads:
                reasons |= r[3]
            into.update(
                clk_min=min(clocks),
                clk_med=statistics.median(clocks),
                pw_max=max(r[2] for r in reads),
                reasons=hex(reasons),
                wall_ms=round((end - start) * 1e3, 1),
            )

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def harness_median(clock: timing.CudaClock, fn, samples: int) -> float:
    timing.warm_up(partial(clock.time_call, fn), 5, 100)
    return statistics.median(clock.time_call(fn) for _ in range(samples))


def single_rows(plan, poller: Poller) -> list[dict]:
    index = {c.name: i for i, c in enumerate(plan.configs)}
    device = torch.device("cuda")
    clock = timing.CudaClock(device, flush_l2=True)
    clock256 = timing.CudaClock(device, flush_l2=True)
    clock256._flush_buffers = [torch.empty(256 << 18, dtype=torch.int32, device=device)]
    clock256._flush_turns = itertools.cycle(clock256._flush_buffers)
    rows = []
    for name, impls in SINGLE.items():
        config = plan.configs[index[name]]
        q, k, v = make_inputs(config, device, config_seed(plan.seed, index[name], "timing"))
        for impl in impls:
            fn = partial(registry.get(impl).run, q, k, v, config.causal)
            try:
                fn()
            except Exception as exc:  # a kernel being edited elsewhere must not stop the rest
                rows.append({"config": name, "impl": impl, "error": str(exc)[:200]})
                continue
            row: dict = {"config": name, "impl": impl}
            plain = partial(triton.testing.do_bench, fn, 25, 100, return_mode="median")
            for key, measure in (
                ("dobench", plain),
                ("harness", partial(harness_median, clock, fn, 60)),
                ("harness_flush256", partial(harness_median, clock256, fn, 60)),
                (
                    "dobench_spin",
                    partial(
                        triton.testing.do_bench,
                        fn,
                        25,
                        100,
                        grad_to_none=[SpinBeforeEachCall(clock.cover_us())],
                        return_mode="median",
                    ),
                ),
                ("dobench_again", plain),
            ):
                state: dict = {}
                with poller.window(state):
                    ms = measure()
                row[key] = {"ms": ms, **state}
            row["cover_us"] = clock.cover_us()
            rows.append(row)
            print(_single_line(row), flush=True)
    return rows


def _single_line(row: dict) -> str:
    base = row["dobench"]["ms"]
    parts = [f"{row['config']:27} {row['impl']:10}"]
    for key in ("dobench", "harness", "harness_flush256", "dobench_spin", "dobench_again"):
        r = row[key]
        parts.append(
            f"{key} {r['ms']:.5f} ({100 * (r['ms'] / base - 1):+.1f}%) "
            f"clk {r.get('clk_min')}/{r.get('clk_med')} pw {r.get('pw_max', 0):.0f} "
            f"{r.get('reasons')}"
        )
    return "\n    ".join(parts)


def graph_rows(plan) -> list[dict]:
    """Harness graph samples vs do_bench_cudagraph (no flush, one huge batch) vs do_bench
    replaying the harness's own graph batch (flushed before each replay, like the harness)."""
    index = {c.name: i for i, c in enumerate(plan.configs)}
    device = torch.device("cuda")
    clock = timing.CudaClock(device, flush_l2=True)
    noflush = timing.CudaClock(device, flush_l2=False)
    rows = []
    for name in GRAPH:
        config = plan.configs[index[name]]
        q, k, v = make_inputs(config, device, config_seed(plan.seed, index[name], "timing"))
        for impl in plan.implementations:
            fn = partial(registry.get(impl).run, q, k, v, config.causal)
            try:
                fn()
            except Exception as exc:
                rows.append({"config": name, "impl": impl, "error": str(exc)[:200]})
                continue
            settled = timing.settled_median_ms(timing.warm_up(partial(clock.time_call, fn), 5, 100))
            calls = timing.graph_calls_for(settled * 1e3)
            sampler = clock.graph_sampler([fn], calls)
            harness = statistics.median(sampler() for _ in range(60))
            sampler_nf = noflush.graph_sampler([fn], calls)
            harness_nf = statistics.median(sampler_nf() for _ in range(60))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
            replay_ms = triton.testing.do_bench(graph.replay, 25, 100, return_mode="median")
            with torch.cuda.stream(torch.cuda.Stream()):
                cudagraph = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
            row = {
                "config": name,
                "impl": impl,
                "calls": calls,
                "harness": harness,
                "harness_noflush": harness_nf,
                "dobench_replay": replay_ms / calls,
                "dobench_cudagraph": cudagraph,
            }
            rows.append(row)
            print(
                f"{name:27} {impl:10} calls {calls:3} harness {harness * 1e3:.3f} us  "
                f"noflush {harness_nf * 1e3:.3f}  "
                f"dobench(replay) {row['dobench_replay'] * 1e3:.3f}  "
                f"cudagraph {cudagraph * 1e3:.3f}",
                flush=True,
            )
    return rows


def stability(plan, poller: Poller, rounds: int, label: str) -> dict:
    """The runner's loop for one config, many rounds: per-sample time, host enqueue time,
    cover and NVML clock, to see when and how its medians move."""
    index = plan.configs.index(next(c for c in plan.configs if c.name == STABILITY))
    config = plan.configs[index]
    device = torch.device("cuda")
    clock = timing.CudaClock(device, flush_l2=True)
    q, k, v = make_inputs(config, device, config_seed(plan.seed, index, "timing"))
    samplers = {}
    for n in plan.implementations:
        fn = partial(registry.get(n).run, q, k, v, config.causal)
        try:
            fn()
        except Exception:
            continue
        samplers[n] = partial(clock.time_call, fn)
        timing.warm_up(samplers[n], 5, 100)
    series: dict[str, list] = {n: [] for n in samplers}
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for _, name, ms in timing.interleaved_rounds(samplers, rounds, rng, lambda: False):
        series[name].append(
            (round(time.perf_counter() - t0, 5), ms, clock._host_us[-1], clock.cover_us())
        )
    block = 50
    print(f"stability {label}: medians per {block} rounds (us), host/cover us median")
    for name, s in series.items():
        meds = [
            statistics.median(x[1] for x in s[i : i + block]) * 1e3 for i in range(0, len(s), block)
        ]
        host = statistics.median(x[2] for x in s)
        cover = statistics.median(x[3] for x in s)
        slow = sum(x[2] + 5 > x[3] for x in s)
        print(
            f"  {name:10} {' '.join(f'{m:.1f}' for m in meds)}  host {host:.0f} cover {cover:.0f} "
            f"host>cover-5us {slow}",
            flush=True,
        )
    return {"label": label, "series": series}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    plan = resolve_plan("default")
    poller = Poller()
    result = {}
    # First, from a cold GPU: the state the first configs of a run see.
    result["stability_cold"] = stability(plan, poller, args.rounds, "cold")
    result["single"] = single_rows(plan, poller)
    result["graph"] = graph_rows(plan)
    result["stability_warm"] = stability(plan, poller, args.rounds, "warm")
    poller.close()
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
