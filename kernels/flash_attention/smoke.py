"""Import-and-run smoke test of the built library against the float64 reference."""

from __future__ import annotations

import itertools

import torch

from kernels.reference import reference_attention

# bf16 keeps 8 mantissa bits: its rel L2 error on random inputs sits near 4e-3.
_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def smoke_test() -> list[str]:
    """Runs every unit once on a small odd-length input; returns failure descriptions."""
    from kernels.flash_attention import backend_name, flash_attention_with_lse

    failures = []
    cases = itertools.product((torch.float16, torch.bfloat16), (64, 128), (False, True))
    for dtype, head_dim, causal in cases:
        q, k, v = (torch.randn(2, 3, 97, head_dim, device="cuda", dtype=dtype) for _ in range(3))
        out, _ = flash_attention_with_lse(q, k, v, causal=causal)
        torch.cuda.synchronize()
        ref = reference_attention(q, k, v, causal)
        err = rel_l2(out, ref)
        name = backend_name(q, causal)
        if not torch.isfinite(out).all() or not err <= _TOLERANCE[dtype]:
            failures.append(f"{name}: rel L2 error {err:.2e} > {_TOLERANCE[dtype]:.0e}")
        else:
            print(f"ok   {name}: rel L2 error {err:.2e}")
    return failures
