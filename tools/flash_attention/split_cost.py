"""Where a split last round's time goes (developer tool; NOTES.md h50, h51).

For D = 64 non-causal launches of one length and batch at each head count, two builds of this
tree in one process: the shipped one and one whose last round is never split
(FLASH_SM90_SPLIT_TAIL=1, three consumers always). Per build and head count: each kernel's
device time (torch.profiler over flushed calls: the grid, and the split's combine where one
ran) and the call's time (bench.paired_ms, flushed, the two builds in turns), one JSON line
each. A round of whole units takes the grid time of a head count whose units fill whole
rounds, divided by its rounds; against it, what the split grid and the combine add.

    PYTHONPATH=.:tools/flash_attention python3 tools/flash_attention/split_cost.py \\
        [--seqlen 4096] [--batch 2] [--heads 9,10,11,12,13,15,16] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from functools import partial

import torch
from ab import OWN_STATICS_FLAG
from bench import paired_ms, tflops

from kernels.flash_attention import build
from kernels.flash_attention.api import _forward, _Library

BUILDS = {"split": {}, "unsplit": {"FLASH_SM90_SPLIT_TAIL": 1, "FLASH_SM90_WAVE_PLAN": 1}}


def kernel_times_us(fn, flush: torch.Tensor, calls: int) -> dict[str, float]:
    """Median device time of each flash kernel over `calls` flushed calls: "grid", "combine"."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for event in prof.events():
        if "flash" in event.name:
            kind = "combine" if "combine" in event.name else "grid"
            times.setdefault(kind, []).append(event.device_time)
    return {kind: round(statistics.median(values), 2) for kind, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", default="9,10,11,12,13,15,16")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per cell")
    parser.add_argument("--reps", type=int, default=40, help="paired calls per cell")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    # Two builds of one code base in one process keep their own launcher statics (ab.py).
    appended = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} {OWN_STATICS_FLAG}".strip()
    os.environ["NVCC_APPEND_FLAGS"] = appended
    libraries = {name: _Library(build.build(defines=d)) for name, d in BUILDS.items()}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    dtype = getattr(torch, args.dtype)
    rows = []
    for heads in (int(h) for h in args.heads.split(",")):
        shape = (args.batch, heads, args.seqlen, 64)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
        fns = {
            name: partial(_forward, q, k, v, False, 1 / math.sqrt(64), lib=library)
            for name, library in libraries.items()
        }
        row: dict = {"heads": heads}
        for name, fn in fns.items():
            for _ in range(3):
                fn()
            row[name] = kernel_times_us(fn, flush, args.calls)
        times = paired_ms(fns, flush, args.reps)
        for name in fns:
            ms = statistics.median(times[name])
            row[name]["call_us"] = round(ms * 1e3, 2)
            row[name]["tflops"] = round(tflops(args.batch, heads, args.seqlen, 64, False, ms), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
