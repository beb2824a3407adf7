"""Every attention implementation bench can time, by name.

    sdpa            torch's scaled_dot_product_attention, default backend choice
    sdpa-flash      SDPA pinned to its flash backend: FlashAttention-2 (what SDPA runs on an
                    L4), or FA4 where activated (`flash_kernel`)
    sdpa-cudnn      SDPA pinned to cuDNN
    sdpa-efficient  SDPA pinned to memory-efficient attention
    sdpa-math       SDPA pinned to the plain math path
    reference       float64 attention (benches.reference), the correctness yardstick
    xformers, fa4, flashinfer, cudnn-fe
                    public peers (benches/peers.py, docs/peers.md), CUDA only, installed on
                    the target only when a launch asks for them (`--peers`)
    sdpa-extraN     calibration only (N = 16, 32, 64, 128): default SDPA, then one more SDPA
                    over the first 1/N of the queries (discarded). Not 1/N of the cost:
                    that extra kernel fills under one wave of the GPU, so it lasts about
                    one wave of the main one whatever N is (measured on an H100: 13-40%
                    slower for every N), a large slowdown of known direction

Their names are results_schema/implementations.py's, which the controller checks plans
against without torch and no kernel's contract may take. Kernels with a contract
(bench-kernel.toml: a user's, and ours, `flash` from kernels/) are not listed here: each run
adds them from its plan (benches/user_kernel.py), each in a worker process of its own.

Each implementation says which backend actually ran (`backend_for`), so a CSV row never
claims a kernel that did not run: SDPA's default asks torch's own dispatcher which backend
it picks, and SDPA's flash backend on the GPU says which FlashAttention torch routes it to
(its own FA2, or an implementation activated in this process: `sdpa:flash-fa4`).

k and v may have fewer heads than q (grouped-query attention, H_q % H_kv == 0): every
implementation reads them without copies of its own making; SDPA is asked for that with
enable_gqa (`_sdpa`).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from benches.fp8 import DESCALE_NAMES, FP8_DTYPES, dequantize
from benches.implementation import (
    WIDE_AND_HALF_DTYPES,
    AttentionFn,
    Implementation,
    as_implementation,
)
from benches.reference import reference_attention
from results_schema.implementations import CALIBRATION_FRACTIONS, SDPA_BACKENDS

__all__ = ["AttentionFn", "Implementation", "as_implementation", "get", "IMPLEMENTATIONS", "NAMES"]


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa-math": SDPBackend.MATH,
    }[name]


def _sdpa(q, k, v, causal):
    """SDPA with grouped-query attention turned on only where k/v have fewer heads than q, so
    that every other call reaches SDPA exactly as before (and keeps its backend choice)."""
    if k.shape[-3] != q.shape[-3]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flash_kernel(device: torch.device) -> str:
    """Which FlashAttention SDPA's flash backend runs on `device`: torch's own ("flash"),
    or on the GPU an implementation activated in this process through
    torch.nn.attention.activate_flash_attention_impl (e.g. "flash-fa4": FA4 on Hopper and
    Blackwell), which takes over the flash operators of CUDA tensors only."""
    from torch.nn import attention

    current = getattr(attention, "current_flash_attention_impl", None)  # newer torch only
    impl = current() if current is not None and device.type == "cuda" else None
    return f"flash-{impl.lower()}" if impl else "flash"


def _pinned_backend(name: str):
    kernel = name.removeprefix("sdpa-")
    if kernel == "flash":
        return lambda q, k, v, causal: "sdpa:" + flash_kernel(q.device)
    return lambda *a: "sdpa:" + kernel


def _pinned_sdpa(name: str) -> AttentionFn:
    from torch.nn.attention import sdpa_kernel

    backend = _sdpa_backend(name)

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return _sdpa(q, k, v, causal)

    return run


def _default_sdpa(q, k, v, causal):
    return _sdpa(q, k, v, causal)


def _sdpa_plus_extra(fraction: int) -> AttentionFn:
    def run(q, k, v, causal):
        out = _sdpa(q, k, v, causal)
        rows = max(1, q.shape[-2] // fraction)
        _sdpa(q[..., :rows, :], k, v, False)  # the known extra work
        return out

    return run


# torch's SDPA takes no e4m3 inputs and no descales (torch 2.11-2.13): an FP8 config's SDPA
# rows say so, and cudnn-fe times cuDNN's own FP8 SDPA.
NO_FP8 = "torch's SDPA takes no FP8 inputs or descales; cudnn-fe times cuDNN's FP8 SDPA"

_CHOICE_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def default_sdpa_backend(q, k, v, causal) -> str:
    """Which backend SDPA's dispatcher picks for these inputs (torch's own choice function),
    and for its flash backend which FlashAttention runs (`flash_kernel`)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "sdpa:unknown"
    gqa = {"enable_gqa": True} if k.shape[-3] != q.shape[-3] else {}
    with contextlib.suppress(RuntimeError, TypeError):
        choice = _CHOICE_NAMES.get(int(choose(q, k, v, is_causal=causal, **gqa)), "unknown")
        return "sdpa:" + (flash_kernel(q.device) if choice == "flash" else choice)
    return "sdpa:unknown"


def _needs_cuda(device: torch.device) -> str | None:
    return None if device.type == "cuda" else "needs a CUDA GPU"


def _always(device: torch.device) -> str | None:
    return None


def _reference(q, k, v, causal, **descales):
    """Float64 attention; on FP8 inputs, on the values they stand for (their descales)."""
    if descales:
        names = zip((q, k, v), DESCALE_NAMES, strict=True)
        q, k, v = (dequantize(t, descales[name]) for t, name in names)
    return reference_attention(q, k, v, causal)


def _registry() -> dict[str, Implementation]:
    from benches import peers

    impls = {
        "sdpa": Implementation(
            "sdpa", _default_sdpa, default_sdpa_backend, _always, dtype_note=NO_FP8
        ),
        "reference": Implementation(
            "reference",
            _reference,
            lambda *a: "reference:float64",
            _always,
            dtypes=(*WIDE_AND_HALF_DTYPES, *FP8_DTYPES),
        ),
    }
    for fraction in CALIBRATION_FRACTIONS:
        name = f"sdpa-extra{fraction}"
        impls[name] = Implementation(
            name, _sdpa_plus_extra(fraction), default_sdpa_backend, _always, dtype_note=NO_FP8
        )
    for name in SDPA_BACKENDS:
        impls[name] = Implementation(
            name,
            _pinned_sdpa(name),
            _pinned_backend(name),
            _always if name == "sdpa-math" else _needs_cuda,
            dtype_note=NO_FP8,
        )
    impls.update(peers.implementations())  # public libraries, timed when a plan names them
    return impls


IMPLEMENTATIONS = _registry()
NAMES = tuple(IMPLEMENTATIONS)


def get(name: str) -> Implementation:
    try:
        return IMPLEMENTATIONS[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r}; known: {', '.join(NAMES)}") from None
