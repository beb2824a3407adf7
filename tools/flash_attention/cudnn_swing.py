"""Why SDPA cuDNN's speed moves between processes (developer tool, NOTES.md "2026-11-28, later").

Per cell: the same shape timed with fresh q, k, v placed at several addresses (a pad tensor of a
different size allocated before each set), ours beside cuDNN (bench.paired_ms), and the names
of the kernels cuDNN launched for that set (torch.profiler). Run it in several fresh processes:
if cuDNN's time moves with the set inside one process, the allocation decides; if it is flat
within a process but moves between them, something per process does (its plan, the clocks);
if its kernel name changes, cuDNN picked another engine.

    PYTHONPATH=.:tools/flash_attention python3 tools/flash_attention/cudnn_swing.py --sets 4
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from functools import partial

import torch
from bench import HIDDEN, IMPLS, TOKENS, paired_ms
from torch.profiler import ProfilerActivity, profile

from kernels.flash_attention.api import _forward, load_library

CELLS = [  # (dtype, D, causal, S): the cells that swung most in NOTES "2026-11-28"
    ("bfloat16", 64, True, 1024),
    ("float16", 64, False, 1024),
    ("bfloat16", 128, False, 4096),
    ("float16", 128, False, 2048),
]


def kernel_names(fn) -> list[str]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", type=int, default=4)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    lib = load_library()
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    keep = []  # every set stays allocated, so that the next lands elsewhere
    for dtype_name, head_dim, causal, seqlen in CELLS:
        dtype = getattr(torch, dtype_name)
        batch, heads = TOKENS // seqlen, HIDDEN // head_dim
        for s in range(args.sets):
            keep.append(
                torch.empty((s * 37 + 1) * 2**20 + s * 4096, dtype=torch.uint8, device="cuda")
            )
            q, k, v = (
                torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype)
                for _ in range(3)
            )
            keep.append((q, k, v))
            fns = {
                "ours": partial(_forward, q, k, v, causal, 1 / math.sqrt(head_dim), lib=lib),
                "cudnn": partial(IMPLS["sdpa-cudnn"], q, k, v, causal),
            }
            times = paired_ms(fns, flush, args.reps)
            ratio = statistics.median(
                c / o for o, c in zip(times["ours"], times["cudnn"], strict=True)
            )
            row = {
                "tag": args.tag,
                "cell": f"{dtype_name[:4]}{head_dim}{'c' if causal else ''}{seqlen}",
                "set": s,
                "q_ptr_mod_1M": q.data_ptr() % 2**20,
                "q_ptr": hex(q.data_ptr()),
                "ours_ms": round(statistics.median(times["ours"]), 4),
                "cudnn_ms": round(statistics.median(times["cudnn"]), 4),
                "cudnn_min_ms": round(min(times["cudnn"]), 4),
                "cudnn_max_ms": round(max(times["cudnn"]), 4),
                "ours_over_cudnn": round(ratio, 4),
                "cudnn_kernels": kernel_names(fns["cudnn"]),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
