"""Tail shapes for compute-sanitizer: every unit once per odd length, outputs checked. k and v
have half of q's heads (grouped-query attention): a k/v head indexed by the query head would
read past their allocations.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python3 tools/flash_attention/tails.py [--define NAME=INT ...]

With torch's caching allocator off each tensor is its own allocation, so a read or write past
the last row of q, k, v, o or lse leaves it and memcheck reports it.

MANY_TILES adds, for the Hopper path, launches with several tiles per block of its persistent
grid (about 4-13 per SM on an H100), so that a block's Q buffers (h16) and K/V ring are
reused across tiles, with a partial last query block mid-way.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from benches.reference import reference_attention
from kernels.flash_attention import build, flash_attention_with_lse, load_library
from kernels.flash_attention.generate import HEAD_DIMS

SEQLENS = (1, 17, 97, 1025, 2049)
# (batch, q heads, length): k and v get half the heads.
SHAPES = [(1, 4, seqlen) for seqlen in SEQLENS]
MANY_TILES = [(2, 96, 1025), (1, 48, 2049)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--define", action="append", default=[], metavar="NAME=INT")
    args = parser.parse_args()
    defines = build.parse_defines(args.define)
    load_library(defines=defines)
    bad = 0
    # The sm_80 kernel keeps no state across tiles: the longer shapes add nothing there.
    sm80_only = any(defines.get(name) for name in build.SM80_SWITCHES)
    shapes = SHAPES + ([] if sm80_only else MANY_TILES)
    grid = itertools.product((torch.float16, torch.bfloat16), HEAD_DIMS, (False, True), shapes)
    for dtype, head_dim, causal, (batch, heads, seqlen) in grid:
        q = torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype)
        k, v = (
            torch.randn(batch, heads // 2, seqlen, head_dim, device="cuda", dtype=dtype)
            for _ in "kv"
        )
        # The negative-scale path (Q negated in place), in one buffer and in turns of two.
        scale = -0.1 if seqlen == 97 or (batch, heads, seqlen) == MANY_TILES[1] else None
        out, lse = flash_attention_with_lse(q, k, v, causal=causal, scale=scale)
        torch.cuda.synchronize()
        ref = reference_attention(q, k, v, causal, scale=scale)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        ok = bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all()) and err < 2e-2
        bad += not ok
        verdict = "ok " if ok else "BAD"
        shape = f"B={batch} H={heads} S={seqlen}"
        print(f"{verdict} {dtype} D={head_dim} causal={causal} {shape} err={err:.1e}")
    print(f"tails: {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
