"""Tail shapes for compute-sanitizer: every unit once per odd length, outputs checked. k and v
have half of q's heads (grouped-query attention): a k/v head indexed by the query head would
read past their allocations.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python3 tools/flash_attention/tails.py [--define NAME=INT ...]

With torch's caching allocator off each tensor is its own allocation, so a read or write past
the last row of q, k, v, o or lse leaves it and memcheck reports it.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from benches.reference import reference_attention
from kernels.flash_attention import build, flash_attention_with_lse, load_library
from kernels.flash_attention.generate import HEAD_DIMS

SEQLENS = (1, 17, 97, 1025, 2049)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--define", action="append", default=[], metavar="NAME=INT")
    args = parser.parse_args()
    load_library(defines=build.parse_defines(args.define))
    bad = 0
    grid = itertools.product((torch.float16, torch.bfloat16), HEAD_DIMS, (False, True), SEQLENS)
    for dtype, head_dim, causal, seqlen in grid:
        q = torch.randn(1, 4, seqlen, head_dim, device="cuda", dtype=dtype)
        k, v = (torch.randn(1, 2, seqlen, head_dim, device="cuda", dtype=dtype) for _ in "kv")
        scale = -0.1 if seqlen == 97 else None  # the negative-scale path (Q negated in place)
        out, lse = flash_attention_with_lse(q, k, v, causal=causal, scale=scale)
        torch.cuda.synchronize()
        ref = reference_attention(q, k, v, causal, scale=scale)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        ok = bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all()) and err < 2e-2
        bad += not ok
        verdict = "ok " if ok else "BAD"
        print(f"{verdict} {dtype} D={head_dim} causal={causal} S={seqlen} err={err:.1e}")
    print(f"tails: {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
