"""FlashAttention forward kernels (CUDA C++, C ABI) and their Python binding: a
FlashAttention-3 style Hopper path (wgmma, TMA) on sm_90 and a FlashAttention-2 style
kernel (mma.sync) everywhere else and as its fallback.

    from kernels.flash_attention import flash_attention
    out = flash_attention(q, k, v, causal=True)          # q, k, v: (B, H, S, D) on CUDA

The library is compiled with nvcc on first use (see build.py) and cached.
"""

from __future__ import annotations

from kernels.flash_attention.api import (
    backend_name,
    build_record,
    flash_attention,
    flash_attention_with_lse,
    load_library,
    validate,
)

__all__ = [
    "backend_name",
    "build_record",
    "flash_attention",
    "flash_attention_with_lse",
    "load_library",
    "validate",
]
