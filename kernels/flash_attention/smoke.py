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


# FP8 (e4m3): P rounded to e4m3 costs a few percent of rel L2 error at 97 keys; a unit with a
# wrong key order or scale is off by ~1 or more. The tight bound (twice an emulated FP8
# reference's error) is tests/gpu/test_flash_fp8_gpu.py's.
_FP8_TOLERANCE = 0.1


def smoke_test_fp8() -> list[str]:
    """The FP8 units (sm_90 only) on the same shapes, e4m3 inputs with per-tensor descales,
    against float64 attention on the dequantized inputs."""
    from kernels.flash_attention.generate import FP8_HEAD_DIMS

    if torch.cuda.get_device_capability() != (9, 0):
        return []
    failures = []
    for head_dim, causal, group in itertools.product(FP8_HEAD_DIMS, (False, True), (1, 2)):
        shapes = (
            (2, 6, 97, head_dim),
            (2, 6 // group, 97, head_dim),
            (2, 6 // group, 97, head_dim),
        )
        x = [torch.randn(shape, device="cuda") for shape in shapes]
        descales = [t.abs().amax().reshape(1) / 448 for t in x]
        q8, k8, v8 = (
            (t / d).clamp(-448, 448).to(torch.float8_e4m3fn)
            for t, d in zip(x, descales, strict=True)
        )
        out, _ = flash_attention_with_lse(
            q8, k8, v8, causal=causal,
            q_descale=descales[0], k_descale=descales[1], v_descale=descales[2],
        )  # fmt: skip
        torch.cuda.synchronize()
        deq = [t.double() * d.double() for t, d in zip((q8, k8, v8), descales, strict=True)]
        ref = float64_attention(*deq, causal)
        err = rel_l2(out, ref)
        name = backend_name(q8, causal) + (" causal" if causal else "")
        name += f" (q heads per k/v head: {group})" if group > 1 else ""
        if not torch.isfinite(out).all() or not err <= _FP8_TOLERANCE:
            failures.append(f"{name}: rel L2 error {err:.2e} > {_FP8_TOLERANCE:.0e}")
        else:
            print(f"ok   {name}: rel L2 error {err:.2e}")
    return failures


def main() -> int:
    failures = smoke_test() + smoke_test_fp8()
    for line in failures:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
