"""Import-and-run smoke test of the built library against SDPA in float64.

Part of the kernel's own tree, above the package it checks (`python -m
kernels.flash_attention.smoke` on the target, after the build; it was the build's --check,
which made build.py import the package that imports build.py): it imports nothing of the
harness, so a revision of kernels/ checks itself as any kernel tree would.
"""

from __future__ import annotations

import itertools
import sys

import torch
import torch.nn.functional as F

from kernels.flash_attention import backend_name, flash_attention_with_lse
from kernels.flash_attention.generate import HEAD_DIMS

# bf16 keeps 8 mantissa bits: its rel L2 error on random inputs sits near 4e-3.
_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def float64_attention(q, k, v, causal: bool) -> torch.Tensor:
    """The same attention in float64 (square inputs: SDPA's causal mask is ours)."""
    q, k, v = q.double(), k.double(), v.double()
    grouped = k.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=grouped)


def smoke_test() -> list[str]:
    """Runs every unit on a small odd-length input, with as many k/v heads as query heads and
    with grouped-query attention (2 query heads per k/v head); returns failure descriptions."""
    failures = []
    cases = itertools.product((torch.float16, torch.bfloat16), HEAD_DIMS, (False, True), (1, 2))
    for dtype, head_dim, causal, group in cases:
        q = torch.randn(2, 6, 97, head_dim, device="cuda", dtype=dtype)
        k, v = (torch.randn(2, 6 // group, 97, head_dim, device="cuda", dtype=dtype) for _ in "kv")
        out, _ = flash_attention_with_lse(q, k, v, causal=causal)
        torch.cuda.synchronize()
        ref = float64_attention(q, k, v, causal)
        err = rel_l2(out, ref)
        name = backend_name(q, causal) + (f" (q heads per k/v head: {group})" if group > 1 else "")
        if not torch.isfinite(out).all() or not err <= _TOLERANCE[dtype]:
            failures.append(f"{name}: rel L2 error {err:.2e} > {_TOLERANCE[dtype]:.0e}")
        else:
            print(f"ok   {name}: rel L2 error {err:.2e}")
    return failures


def main() -> int:
    failures = smoke_test()
    for line in failures:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
