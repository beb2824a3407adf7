"""Python binding: validates inputs, then calls the C-ABI library through ctypes.

No torch extension is involved: the library is built by build.py (or found in its cache) on
first use and loaded with ctypes. Eager calls go straight to the library (a few µs of host
time); under torch.compile the call goes through the `bench_flash::fwd` custom op, whose
fake implementation gives output shapes without running the kernel. Both launch on the
current CUDA stream, so both work inside CUDA-graph capture.
"""

from __future__ import annotations

import ctypes
import math

import torch

# Submodules by their own names: the package (__init__) imports this module.
import kernels.flash_attention.build as build
import kernels.flash_attention.generate as generate
from kernels.support import (
    fp8_unsupported_reason,
    head_dim_unsupported_reason,
    unsupported_reason,
)

# torch dtype -> its row of the generated dtype table (the C enum comes from the same rows).
SUPPORTED_DTYPES = {getattr(torch, d.torch_name): d for d in generate.DTYPES}
SUPPORTED_HEAD_DIMS = generate.HEAD_DIMS
_INT32_MAX = 2**31 - 1


class FlashFwdParams(ctypes.Structure):
    """Mirror of FlashFwdParams in csrc/flash_api.h (same field order and types)."""

    _fields_ = [
        *[(name, ctypes.c_void_p) for name in ("q", "k", "v", "o", "lse")],
        *[
            (f"{t}_{dim}_stride", ctypes.c_int64)
            for t in "qkvo"
            for dim in ("batch", "head", "row")
        ],
        *[(n, ctypes.c_int32) for n in ("batch", "heads", "seqlen_q", "seqlen_k", "head_dim")],
        ("scale", ctypes.c_float),
        ("q_heads_per_kv_head", ctypes.c_int32),
    ]


# flash_api.h's FLASH_PARAMS_VERSION that added q_heads_per_kv_head (grouped-query attention).
_PARAMS_VERSION_GQA = 2


class FlashFp8Params(ctypes.Structure):
    """Mirror of FlashFp8Params in csrc/flash_api.h (the FP8 entry point's parameters)."""

    _fields_ = [
        ("base", FlashFwdParams),
        *[(f"{t}_descale", ctypes.c_void_p) for t in "qkv"],
        ("v_scratch", ctypes.c_void_p),
        ("flags", ctypes.c_int32),
    ]


# FP8 (e4m3 in, bf16 out): Hopper only, these head dims (kernels/support.py's FP8_HEAD_DIMS).
FP8_DTYPE = torch.float8_e4m3fn
FP8_HEAD_DIMS = generate.FP8_HEAD_DIMS
# Every input dtype flash_attention takes: what bench-kernel.toml declares (a test holds them
# equal), so the harness hands our kernel FP8 configs too.
ACCEPTED_DTYPES = (*SUPPORTED_DTYPES, FP8_DTYPE)
# V^T's scratch (csrc/flash_api.h, FlashFp8Params): tile images of 128 keys (head_dim x 128
# bytes) or of 224 (head_dim x 256), the larger of the two layouts' sizes.
_FP8_TILE_LAYOUTS = ((128, 128), (224, 256))  # (keys a tile, bytes a V^T row of its image)


def _fp8_scratch_bytes(batch: int, kv_heads: int, head_dim: int, seqlen_k: int) -> int:
    row = max(-(-seqlen_k // keys) * width for keys, width in _FP8_TILE_LAYOUTS)
    return batch * kv_heads * head_dim * row


class _Library:
    """The loaded .so with its entry points' argtypes set once."""

    def __init__(self, record: dict):
        self.record = record
        self.cdll = ctypes.CDLL(record["library"])
        self.fwd = self.cdll.flash_attention_fwd
        self.fwd.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.fwd.restype = ctypes.c_int
        self.error_string = self.cdll.flash_error_string
        self.error_string.argtypes = [ctypes.c_int]
        self.error_string.restype = ctypes.c_char_p
        # The FP8 entry point (absent from libraries built before it, and a no-op answering
        # FLASH_ERR_UNSUPPORTED in builds without sm_90 units).
        self.fwd_fp8 = getattr(self.cdll, "flash_attention_fwd_fp8", None)
        if self.fwd_fp8 is not None:
            self.fwd_fp8.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            self.fwd_fp8.restype = ctypes.c_int
        # A library built before flash_params_version() existed (an A/B baseline of an older
        # tree) reads version 1's fields and would index k/v by the query head.
        version = getattr(self.cdll, "flash_params_version", None)
        self.params_version = int(version()) if version is not None else 1


_library: _Library | None = None


def load_library(arch: str | None = None, defines: dict[str, int] | None = None) -> _Library:
    """Builds or loads the library for the visible GPU (or `arch`); cached per process.

    `defines` (measurement switches, see build.py) is for developer tools: a call with other
    switches than the loaded library's builds and switches to that library.
    """
    global _library
    wanted = dict(sorted((defines or {}).items()))
    if _library is None or (defines is not None and _library.record["defines"] != wanted):
        _library = _Library(build.build(arch, defines=wanted))
    return _library


def build_record() -> dict:
    """The KernelBuild-shaped record of the loaded library (see results_schema.KernelBuild)."""
    return dict(load_library().record)


def _fail(message: str) -> None:
    raise ValueError(f"flash_attention: {message}")


def _describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}, strides {t.stride()}"


_capable_devices: set[int] = set()


def _check_device_capability(index: int) -> None:
    if index not in _capable_devices:
        major, minor = torch.cuda.get_device_capability(index)
        if unsupported_reason(major, minor):
            _fail(
                f"needs a GPU of compute capability 8.0 or newer; cuda:{index} is {major}.{minor}"
            )
        _capable_devices.add(index)


def validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raises ValueError saying what is wrong and what is allowed; returns None if usable.

    Runs on every call, so it sticks to cheap tensor attributes (a few µs in all).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            _fail(f"{name} is on {t.device}; flash_attention runs on CUDA tensors only")
        if t.dtype not in SUPPORTED_DTYPES:
            _fail(f"{name} has dtype {t.dtype}; allowed: torch.float16, torch.bfloat16")
        if t.dim() != 4:
            _fail(f"{name} must be 4-D (batch, heads, seq, head_dim); got {_describe(t)}")
        sb, sh, ss, sd = t.stride()
        if sd != 1:
            _fail(f"{name}'s last dim must be contiguous (stride 1); got {_describe(t)}")
        if (sb | sh | ss) & 7:
            _fail(f"{name}'s batch/head/seq strides must be multiples of 8; got {_describe(t)}")
    if not (q.dtype == k.dtype == v.dtype):
        _fail(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    _check_shapes(q, k, v)
    reason = head_dim_unsupported_reason(q.shape[-1])
    if reason:
        _fail(reason)
    _check_device_capability(q.get_device())


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """What every entry point asks of q, k, v together: one device, shapes that fit (k/v
    heads dividing q's), keys where there are queries, sizes the launch grid takes."""
    if not (q.device == k.device == v.device):
        _fail(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    b, h, s_q, d = q.shape
    kb, kh, s_k, kd = k.shape
    if k.shape != v.shape:
        _fail(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if kb != b or kd != d:
        _fail(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if kh == 0 or h % kh:
        _fail(
            f"q has {h} heads and k, v have {kh}: grouped-query attention needs the query heads "
            f"to be a whole multiple of the k/v heads (h_q % h_kv == 0)"
        )
    if s_k == 0 and s_q > 0:
        _fail("k and v have no keys (seq length 0)")
    if b > 65535 or h > 65535 or max(s_q, s_k) > _INT32_MAX:
        _fail(f"sizes too large: batch and heads must be <= 65535; got q {tuple(q.shape)}")


def backend_name(q: torch.Tensor, causal: bool) -> str:
    """Which compiled unit runs for q, e.g. 'flash:fwd_hdim64_fp16_causal:sm_89', or on an
    H100 'flash:fwd_hdim128_bf16_sm90:sm_90' (the Hopper path); FP8 q:
    'flash:fwd_hdim128_e4m3_sm90:sm_90' (one unit holds both causal settings)."""
    if q.dtype == FP8_DTYPE and q.shape[-1] in FP8_HEAD_DIMS:
        major, minor = torch.cuda.get_device_capability(q.device)
        return f"flash:{generate.Fp8Unit(q.shape[-1]).name}:sm_{major}{minor}"
    if q.dtype not in SUPPORTED_DTYPES or q.shape[-1] not in SUPPORTED_HEAD_DIMS:
        _fail(f"no kernel for dtype {q.dtype} with head_dim {q.shape[-1]}")
    major, minor = torch.cuda.get_device_capability(q.device)
    arch = f"sm_{major}{minor}"
    # Any measurement switch of the sm_80 kernel turns the Hopper path off (csrc/switches.h).
    defines = _library.record["defines"] if _library is not None else {}
    switched = any(defines.get(name) for name in build.SM80_SWITCHES)
    hopper = (
        generate.has_sm90_path(arch)
        and (q.shape[-1], bool(causal)) in generate.SM90_COVERS
        and not switched
    )
    path = generate.SM90 if hopper else generate.SM80
    unit = generate.Unit(SUPPORTED_DTYPES[q.dtype].name, q.shape[-1], bool(causal), path)
    return f"flash:{unit.name}:{arch}"


def _raw_stream(index: int) -> int:
    """The current stream's cudaStream_t as an int (capture streams included)."""
    # torch's private accessor skips building a Stream object: ~0.2 µs instead of ~2 µs.
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw else torch.cuda.current_stream(index).cuda_stream


def _forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, lib=None
) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, s_q, d = q.shape
    out = torch.empty((b, h, s_q, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
    if (ptrs[0] | ptrs[1] | ptrs[2]) & 15:
        _fail("q, k and v must start at 16-byte aligned addresses (cp.async reads 16 bytes)")
    lib = lib or _library or load_library()  # another build: an A/B baseline's
    params = FlashFwdParams(
        *ptrs,
        out.data_ptr(),
        lse.data_ptr(),
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *out.stride()[:3],
        b,
        h,
        s_q,
        k.shape[2],
        d,
        scale,
        h // k.shape[1],
    )
    index = q.get_device()
    dtype_code = SUPPORTED_DTYPES[q.dtype].code
    if params.q_heads_per_kv_head > 1 and lib.params_version < _PARAMS_VERSION_GQA:
        _fail(
            f"this build of the kernel ({lib.record['library']}) predates grouped-query "
            f"attention: k and v need as many heads as q ({h})"
        )
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            code = lib.fwd(ctypes.addressof(params), dtype_code, causal, _raw_stream(index))
    else:
        code = lib.fwd(ctypes.addressof(params), dtype_code, causal, _raw_stream(index))
    if code != 0:
        raise RuntimeError(f"flash_attention kernel failed: {lib.error_string(code).decode()}")
    return out, lse


def _descale(value, name: str, device: torch.device) -> torch.Tensor | None:
    """A descale factor as the kernel reads it: one float32 on q's device (None: 1.0)."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        value = float(value)
        if not (math.isfinite(value) and value > 0):
            _fail(f"{name} must be a positive finite number; got {value}")
        return torch.tensor([value], dtype=torch.float32, device=device)
    if value.numel() != 1 or value.dtype != torch.float32 or value.device != device:
        _fail(
            f"{name} must be one float32 value on {device} (per-tensor descale); got "
            f"{_describe(value)}"
        )
    return value.reshape(1).contiguous()


def validate_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> None:
    """validate() for FP8 inputs: e4m3 q, k, v on an sm_90 GPU, D 128 or 256, 16-byte strides
    (TMA's), a positive scale."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype != FP8_DTYPE:
            _fail(f"{name}: FP8 attention takes CUDA tensors of torch.float8_e4m3fn, all three")
        if t.dim() != 4:
            _fail(f"{name} must be 4-D (batch, heads, seq, head_dim); got {_describe(t)}")
        sb, sh, ss, sd = t.stride()
        if sd != 1 or (sb | sh | ss) & 15:
            _fail(
                f"{name}: last dim contiguous and batch/head/seq strides multiples of 16 "
                f"elements (16 bytes) for FP8; got {_describe(t)}"
            )
        if t.data_ptr() & 15:
            _fail(f"{name} must start at a 16-byte aligned address")
    _check_shapes(q, k, v)
    if not scale > 0:
        _fail(f"FP8 attention takes a positive scale (the row max is of raw scores); got {scale}")
    reason = fp8_unsupported_reason(torch.cuda.get_device_capability(q.device), q.shape[-1])
    if reason:
        _fail(reason)


def _forward_fp8(q, k, v, causal, scale, descales, flags=0, lib=None):
    b, h, s_q, d = q.shape
    out = torch.empty((b, h, s_q, d), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    kv_heads, s_k = k.shape[1], k.shape[2]
    scratch_bytes = _fp8_scratch_bytes(b, kv_heads, d, s_k)
    scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=q.device)
    lib = lib or _library or load_library()
    if lib.fwd_fp8 is None:
        _fail(f"this build of the kernel ({lib.record['library']}) has no FP8 entry point")
    base = FlashFwdParams(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        b, h, s_q, s_k, d, scale, h // kv_heads,
    )  # fmt: skip
    ptrs = [t.data_ptr() if t is not None else None for t in descales]
    params = FlashFp8Params(base, *ptrs, scratch.data_ptr(), flags)
    index = q.get_device()
    with torch.cuda.device(index):
        code = lib.fwd_fp8(ctypes.addressof(params), causal, _raw_stream(index))
    if code != 0:
        raise RuntimeError(f"flash_attention FP8 kernel failed: {lib.error_string(code).decode()}")
    return out, lse


@torch.library.custom_op("bench_flash::fwd", mutates_args=())
def _fwd_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, v, causal, scale)


@_fwd_op.register_fake
def _fwd_op_fake(q, k, v, causal, scale):
    b, h, s_q, d = q.shape
    return q.new_empty((b, h, s_q, d)), q.new_empty((b, h, s_q), dtype=torch.float32)


def flash_attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    q_descale: torch.Tensor | float | None = None,
    k_descale: torch.Tensor | float | None = None,
    v_descale: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale) v and its log-sum-exp (float32, (B, H, S_q)).

    q: (B, H, S_q, D), k and v: (B, H_kv, S_k, D) with H a multiple of H_kv (grouped-query
    attention: query head h reads k/v head h // (H / H_kv), nothing is copied); float16 or
    bfloat16; D 64, 128 or 256; any strides on B/H/S (multiples of 8 elements), last dim
    contiguous. scale defaults to 1/sqrt(D); any finite value works (negative and zero too),
    inf and NaN are refused.
    Causal masking aligns the last query with the last key (bottom-right), the
    same as SDPA for S_q == S_k; a query row with no visible key gets O = 0 and lse = -inf.
    lse is within the input dtype's unit roundoff of the exact value (bf16 2^-8, fp16 2^-11):
    the Hopper kernels at D = 64 non-causal add each row's probabilities as rounded for P V (on
    the tensor core), so O is divided by exactly the weights it holds; the other kernels add
    them in float32 (about 2e-6).

    FP8: q, k, v of torch.float8_e4m3fn (sm_90 only, D 128 or 256, strides multiples of 16)
    with per-tensor descale factors (one float32 each, a tensor on q's device or a number;
    None is 1.0): the scores are q.k * scale * q_descale * k_descale, the output (bfloat16)
    softmax(scores) v * v_descale. scale must be positive. P is rounded to e4m3 for P V, so O
    carries that rounding's error besides the inputs' (kernels/flash_attention/NOTES.md,
    "FP8 forward"). Eager only (no torch.compile op).
    """
    if isinstance(q, torch.Tensor) and q.dtype == FP8_DTYPE:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        validate_fp8(q, k, v, scale)
        descales = [
            _descale(x, f"{n}_descale", q.device)
            for n, x in (("q", q_descale), ("k", k_descale), ("v", v_descale))
        ]
        return _forward_fp8(q, k, v, bool(causal), scale, descales)
    if not (q_descale is None and k_descale is None and v_descale is None):
        _fail("descale factors are for torch.float8_e4m3fn inputs only")
    if scale is not None:
        scale = float(scale)
        if not math.isfinite(scale):
            _fail(f"scale must be a finite number (any sign, zero included); got {scale}")
    validate(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if torch.compiler.is_compiling():
        return torch.ops.bench_flash.fwd(q, k, v, bool(causal), scale)
    return _forward(q, k, v, bool(causal), scale)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    q_descale: torch.Tensor | float | None = None,
    k_descale: torch.Tensor | float | None = None,
    v_descale: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v; see flash_attention_with_lse for what is accepted (FP8 inputs
    with their descale factors too)."""
    return flash_attention_with_lse(
        q, k, v, causal=causal, scale=scale,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
    )[0]  # fmt: skip
