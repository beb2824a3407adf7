"""Import-and-run smoke test of the built library against the float64 reference."""

from __future__ import annotations

import itertools

import torch

from kernels.flash_attention.generate import HEAD_DIMS
from kernels.reference import reference_attention

# bf16 keeps 8 mantissa bits: its rel L2 error on random inputs sits near 4e-3.
_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def smoke_test() -> list[str]:
    """Runs every unit on a small odd-length input, with as many k/v heads as query heads and
    with grouped-query attention (2 query heads per k/v head); returns failure descriptions."""
    from kernels.flash_attention import backend_name, flash_attention_with_lse

    failures = []
    cases = itertools.product((torch.float16, torch.bfloat16), HEAD_DIMS, (False, True), (1, 2))
    for dtype, head_dim, causal, group in cases:
        q = torch.randn(2, 6, 97, head_dim, device="cuda", dtype=dtype)
        k, v = (torch.randn(2, 6 // group, 97, head_dim, device="cuda", dtype=dtype) for _ in "kv")
        out, _ = flash_attention_with_lse(q, k, v, causal=causal)
        torch.cuda.synchronize()
        ref = reference_attention(q, k, v, causal)
        err = rel_l2(out, ref)
        name = backend_name(q, causal) + (f" (q heads per k/v head: {group})" if group > 1 else "")
        if not torch.isfinite(out).all() or not err <= _TOLERANCE[dtype]:
            failures.append(f"{name}: rel L2 error {err:.2e} > {_TOLERANCE[dtype]:.0e}")
        else:
            print(f"ok   {name}: rel L2 error {err:.2e}")
    return failures
