"""A launch's time against its block count, whole waves and the FA grid's (developer tool).

Ours and sdpa-flash are timed paired (bench.paired_ms) on batch 1 with the head count set so
that the grid holds whole waves of two blocks per SM (6-9 by default) and the FA grid's
block count (B * H = TOKENS / S * HIDDEN / D heads). Per block, a launch of whole waves shows
the kernel's own rate; the FA grid's count adds its partial last wave. The last two lines
say what a launch of the FA grid's count would take at the whole-wave rate, for each: the
most that spreading the last wave's work evenly over the SMs (split-K, stream-K) could give
(NOTES.md, v19).

    PYTHONPATH=.:tools/flash_attention python3 tools/flash_attention/waves.py [--seqlen 1024]

Ours is the L4 path under L4 emulation. Non-causal only: causal blocks differ in length, so
a block count says little there.
"""

from __future__ import annotations

import argparse
import math
import statistics
from functools import partial

import torch
from bench import HIDDEN, IMPLS, L4_DEFINES, TOKENS, paired_ms

from kernels.flash_attention import build
from kernels.flash_attention.api import _forward, _Library

# The L4 path's non-causal shapes (csrc/flash_fwd_launch.cuh): 128 query rows a block, two
# blocks per SM under L4 emulation. The Hopper path's blocks are other shapes.
BLOCK_M = 128
BLOCKS_PER_SM = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlen", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    parser.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    parser.add_argument("--waves", default="6,7,8,9", help="whole waves to time")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    library = _Library(build.build(defines=dict(L4_DEFINES)))
    slots = BLOCKS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    m_blocks = math.ceil(args.seqlen / BLOCK_M)
    fa_heads = TOKENS // args.seqlen * (HIDDEN // args.head_dim)
    whole_heads = {
        w * slots // m_blocks for w in map(int, args.waves.split(",")) if w * slots % m_blocks == 0
    }
    if not whole_heads:
        raise SystemExit(f"no whole wave of {slots} blocks is a whole number of heads")
    dtype = getattr(torch, args.dtype)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    rows = []
    for heads in sorted({*whole_heads, fa_heads}):
        shape = (1, heads, args.seqlen, args.head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
        scale = 1 / math.sqrt(args.head_dim)
        fns = {
            "ours": partial(_forward, q, k, v, False, scale, lib=library),
            "sdpa-flash": partial(IMPLS["sdpa-flash"], q, k, v, False),
        }
        times = paired_ms(fns, flush, args.reps)
        blocks = heads * m_blocks
        ms = {name: statistics.median(samples) for name, samples in times.items()}
        ratio = statistics.median(
            f / o for f, o in zip(times["sdpa-flash"], times["ours"], strict=True)
        )
        rows.append((heads, blocks, blocks / slots, ms, ratio))
    print(f"{args.dtype} S={args.seqlen} D={args.head_dim}, {slots} slots, ours under L4 emulation")
    print(
        f"{'heads':>6}{'blocks':>7}{'waves':>7}{'ours ms':>9}{'us/blk':>8}"
        f"{'flash ms':>9}{'us/blk':>8}{'vs_flash':>9}"
    )
    for heads, blocks, waves, ms, ratio in rows:
        print(
            f"{heads:>6}{blocks:>7}{waves:>7.3f}{ms['ours']:>9.4f}{ms['ours'] * 1e3 / blocks:>8.4f}"
            f"{ms['sdpa-flash']:>9.4f}{ms['sdpa-flash'] * 1e3 / blocks:>8.4f}{ratio:>9.3f}"
        )
    fa_blocks = fa_heads * m_blocks
    measured = next(row_ms for heads, _, _, row_ms, _ in rows if heads == fa_heads)
    for name in ("ours", "sdpa-flash"):
        rate = statistics.median(
            row_ms[name] / blocks for heads, blocks, _, row_ms, _ in rows if heads in whole_heads
        )
        print(
            f"{name}: {fa_blocks} blocks at the whole-wave rate {rate * fa_blocks:.4f} ms, "
            f"measured {measured[name]:.4f} ms ({measured[name] / (rate * fa_blocks) - 1:+.1%})"
        )


if __name__ == "__main__":
    main()
