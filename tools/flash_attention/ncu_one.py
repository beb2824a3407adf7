"""One attention launch to profile under ncu: --warmup launches, then one more.

    ncu --launch-skip 2 --launch-count 1 -k regex:flash_fwd -o rep \
        python3 tools/flash_attention/ncu_one.py --impl flash --l4 --seqlen 1024

The shape is the FA grid's (B*S = 16k tokens, H*D = 2048), as in bench.py. --build-only builds
the library (so that the build stays out of the profiled process) and exits.
"""

from __future__ import annotations

import argparse

import torch
from bench import HIDDEN, IMPLS, L4_DEFINES, TOKENS  # tools/flash_attention/bench.py

from kernels.flash_attention import build, load_library


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=IMPLS, default="flash")
    parser.add_argument("--seqlen", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="bfloat16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--l4", action="store_true", help="L4 emulation, no Hopper path")
    parser.add_argument("--define", action="append", default=[], metavar="NAME=INT")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    defines = dict(L4_DEFINES) if args.l4 else {}
    defines.update(build.parse_defines(args.define))
    load_library(defines=defines)
    if args.build_only:
        return
    batch, heads = TOKENS // args.seqlen, HIDDEN // args.head_dim
    dtype = getattr(torch, args.dtype)
    q, k, v = (
        torch.randn(batch, heads, args.seqlen, args.head_dim, device="cuda", dtype=dtype)
        for _ in range(3)
    )
    for _ in range(args.warmup + 1):
        IMPLS[args.impl](q, k, v, args.causal)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
