"""Worst errors of builds over the GPU tests' shapes (developer tool): each build's largest lse
error (absolute, natural log; the GPU tests bound it by the dtype's unit roundoff, `lse_bound`)
and largest output error as a share of the GPU tests' bound (tests/gpu/test_flash_correctness.py:
rel L2 <= 2 x SDPA's on the same inputs + 1e-5), over several fresh draws.

    python3 tools/flash_attention/precision.py --build head= --build fadd=FLASH_SM90_ROW_SUM=1 \
        --dtypes bfloat16 --head-dims 64 --draws 5

Each build is loaded in turn (load_library switches libraries); every build sees the same
inputs, drawn once per shape and draw.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F

from benches.reference import reference_attention, reference_lse
from kernels.flash_attention import build, flash_attention_with_lse, load_library

SEQLENS = (1, 17, 97, 128, 1000, 1025, 4096)
BATCH_HEADS = ((1, 2), (2, 3))


def rel_l2(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", action="append", required=True, metavar="NAME=SWITCHES")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--head-dims", default="64")
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    builds = {}
    for spec in args.build:
        name, _, switches = spec.partition("=")
        if "@" in name:  # ab.py's NAME@DIR: another tree's library, not load_library's
            raise SystemExit(f"--build {spec!r}: builds of another tree are not supported here")
        builds[name] = build.parse_defines([s for s in switches.split(",") if s])
    worst = {name: {"lse": 0.0, "out_share": 0.0} for name in builds}
    grid = itertools.product(
        [getattr(torch, d) for d in args.dtypes.split(",")],
        [int(d) for d in args.head_dims.split(",")],
        (False, True),
        SEQLENS,
        BATCH_HEADS,
        range(args.draws),
    )
    for dtype, head_dim, causal, seqlen, (batch, heads), _ in grid:
        q, k, v = (
            torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype)
            for _ in range(3)
        )
        ref, ref_lse = reference_attention(q, k, v, causal), reference_lse(q, k, causal)
        err_sdpa = rel_l2(F.scaled_dot_product_attention(q, k, v, is_causal=causal), ref)
        for name, defines in builds.items():
            load_library(defines=defines)
            out, lse = flash_attention_with_lse(q, k, v, causal=causal)
            torch.cuda.synchronize()
            lse_err = (lse.double() - ref_lse).abs().max().item()
            out_share = rel_l2(out, ref) / (2 * err_sdpa + 1e-5)
            w = worst[name]
            w["lse"], w["out_share"] = max(w["lse"], lse_err), max(w["out_share"], out_share)
    for name, w in worst.items():
        print(
            f"{name:>8}: lse max abs error {w['lse']:.2e}, output error up to "
            f"{w['out_share']:.3f} of the tests' bound ({args.dtypes}, D {args.head_dims}, "
            f"{args.draws} draws)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
