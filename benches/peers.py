"""Public attention libraries as registry implementations (results_schema/peers.py lists them
and their pins; docs/peers.md says what each supports and why).

Each adapter hands its library the layout that library documents, made once by the harness
before timing (Implementation.to_native) and mapped back for the checks (from_native), so a
timed call is the library's call and nothing else:

    xformers    memory_efficient_attention on BMHK [batch, seq, heads, dim]; grouped-query
                attention as its documented 5-D BMGHK form, k/v expanded (a view) per call
    fa4         flash_attn.cute.flash_attn_func on BSHD; grouped-query attention native
    flashinfer  BatchPrefillWithRaggedKVCacheWrapper on NHD: a dense batch is a ragged one
                with equal lengths; the inputs are BSHD, viewed as [batch*seq, heads, dim]
                per call (a view); planned once per shape, on its first call (untimed)

A peer says why it cannot run before any call: no CUDA GPU, a GPU older than its documented
support ("unsupported on sm_89"), its install failed on the target (the startup script's
peers partial leaves `peer-installs/<name>.failed` beside benches/), or it is not installed
(the local backend installs nothing into the user's environment). A config outside its
dtypes or head dims is "unsupported: ...". Every row's backend names the installed version.
"""

from __future__ import annotations

import collections
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benches.implementation import Implementation
from results_schema.peers import PEERS, Peer

if TYPE_CHECKING:
    from results_schema import AttentionConfig

INSTALL_FAILED_DIR = Path(__file__).resolve().parent.parent / "peer-installs"
PEERS_LOG = "logs/peers.log"  # where the run's logs keep the install's output
FLASHINFER_WORKSPACE_BYTES = 128 << 20  # flashinfer's recommended float workspace
FLASHINFER_PLANS_KEPT = 8  # wrappers kept: each holds its own int workspace and pinned buffer


@dataclass(frozen=True)
class PeerImplementation(Implementation):
    """An implementation that may also refuse a config it does not support (the gate asks,
    as it asks a user's kernel)."""

    unsupported: Callable[[AttentionConfig], str | None]


# --- layouts ------------------------------------------------------------------------------


def bshd(inputs: tuple) -> tuple:
    """[B, H, S, D] tensors as contiguous [B, S, H, D] copies (flash-attn's and xformers' BMHK
    layout; flashinfer's NHD per sequence)."""
    return tuple(t.transpose(1, 2).contiguous() for t in inputs)


def bhsd(out: torch.Tensor) -> torch.Tensor:
    """A [B, S, H, D] output as [B, H, S, D] (a view)."""
    return out.transpose(1, 2)


def grouped_bmghk(inputs: tuple) -> tuple:
    """q as [B, S, G, H/G, D], k and v as [B, S, G, 1, D] (G = k/v heads): xformers' documented
    grouped-query form, query head h reading k/v head h // (H/G) as the reference does. With
    as many k/v heads as q heads, plain BMHK."""
    q, k, v = bshd(inputs)
    b, s, heads, d = q.shape
    groups = k.shape[2]
    if groups == heads:
        return q, k, v
    per_group = heads // groups
    return q.view(b, s, groups, per_group, d), k.unsqueeze(3), v.unsqueeze(3)


def grouped_to_bhsd(out: torch.Tensor) -> torch.Tensor:
    return bhsd(out.flatten(2, 3) if out.dim() == 5 else out)


# --- what every peer shares -----------------------------------------------------------------


_modules: dict[str, object] = {}


def load(peer: Peer):
    """The peer's module, imported once."""
    if peer.name not in _modules:
        _modules[peer.name] = importlib.import_module(peer.module)
    return _modules[peer.name]


def installed_version(peer: Peer) -> str:
    """The version of the peer that is installed (the rows name it: a local run may time
    another version than the pin)."""
    try:
        return metadata.version(peer.distribution)
    except metadata.PackageNotFoundError:
        root = importlib.import_module(peer.module.split(".")[0])
        return str(getattr(root, "__version__", "unknown"))


def install_failure(peer: Peer) -> str | None:
    """The last line the target's install left for this peer, if it failed there."""
    marker = INSTALL_FAILED_DIR / f"{peer.name}.failed"
    if not marker.is_file():
        return None
    return marker.read_text(encoding="utf-8", errors="replace").strip()[:200] or "no output"


def availability(peer: Peer, device: torch.device) -> str | None:
    """Why `peer` cannot run on `device`, or None: the GPU first (an install cannot fix it)."""
    if device.type != "cuda":
        return "needs a CUDA GPU"
    have = torch.cuda.get_device_capability(device)
    if tuple(have) < peer.min_capability:
        return f"unsupported on sm_{have[0]}{have[1]} ({peer.name} supports {peer.gpus})"
    failed = install_failure(peer)
    if failed is not None:
        return (
            f"unavailable: {peer.pinned.split('==')[0]} not installed "
            f"(pip install failed: {failed}; see {PEERS_LOG})"
        )
    try:
        load(peer)
    except ModuleNotFoundError:
        return (
            f"unavailable: {peer.distribution} not installed "
            f"(install {peer.pinned} to time it locally)"
        )
    except Exception as error:  # a broken install: the peer's rows say so, the run goes on
        text = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        return f"unavailable: import of {peer.module} failed: {text}"
    return None


def dtype_refusal(peer: Peer, config: AttentionConfig) -> str | None:
    if config.dtype in peer.dtypes:
        return None
    return f"unsupported: dtype {config.dtype} ({peer.name} takes {', '.join(peer.dtypes)})"


def _capability() -> tuple[int, int] | None:
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


# --- xformers ------------------------------------------------------------------------------


def xformers_run(q, k, v, causal):
    ops = load(PEERS["xformers"])
    if q.dim() == 5:  # grouped: each k/v head read by its group's query heads (a view)
        k = k.expand(-1, -1, -1, q.shape[3], -1)
        v = v.expand(-1, -1, -1, q.shape[3], -1)
    bias = ops.LowerTriangularMask() if causal else None
    return ops.memory_efficient_attention(q, k, v, attn_bias=bias, scale=q.shape[-1] ** -0.5)


def xformers_backend(q, k, v, causal) -> str:
    """The installed version and, where xformers' dispatcher answers, the operator it picks
    for these inputs (fa3, its own flash build, torch's FA2, cutlass)."""
    peer = PEERS["xformers"]
    version = f"{peer.distribution}=={installed_version(peer)}"
    try:
        from xformers.ops import fmha

        if q.dim() == 5:
            k = k.expand(-1, -1, -1, q.shape[3], -1)
            v = v.expand(-1, -1, -1, q.shape[3], -1)
        bias = fmha.attn_bias.LowerTriangularMask() if causal else None
        inputs = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias, scale=q.shape[-1] ** -0.5)
        inputs.validate_inputs()
        inputs.normalize_bmhk()
        return f"{version}:{fmha._dispatch_fw(inputs, False).NAME}"
    except Exception:  # naming only: the call itself reports what it cannot do
        return version


def xformers_unsupported(config: AttentionConfig) -> str | None:
    return dtype_refusal(PEERS["xformers"], config)


# --- FlashAttention-4 ------------------------------------------------------------------------


def fa4_run(q, k, v, causal):
    cute = load(PEERS["fa4"])
    out = cute.flash_attn_func(q, k, v, softmax_scale=q.shape[-1] ** -0.5, causal=bool(causal))
    return out[0] if isinstance(out, tuple) else out  # (out, lse) in 4.0.0b36


def fa4_backend(q, k, v, causal) -> str:
    peer = PEERS["fa4"]
    arch = _capability()
    path = f":sm{arch[0]}x" if arch else ""
    return f"{peer.distribution}=={installed_version(peer)}{path}"


def fa4_head_dim_refusal(head_dim: int, capability: tuple[int, int] | None) -> str | None:
    """FA4 4.0.0b36's own limits (interface.py, _validate_head_dims): on Hopper 8 to 256, on
    Blackwell (sm_100/sm_110) 8 to 128 or 256; a multiple of 8 in 16 bits everywhere."""
    if head_dim % 8:
        return f"unsupported: head_dim {head_dim} (fa4 needs a multiple of 8)"
    if capability is None:
        return None
    major = capability[0]
    if major == 9 and not 8 <= head_dim <= 256:
        return f"unsupported: head_dim {head_dim} (fa4 on sm_90 takes 8 to 256)"
    if major in (10, 11) and not (8 <= head_dim <= 128 or head_dim == 256):
        return f"unsupported: head_dim {head_dim} (fa4 on sm_{major}x takes 8 to 128, or 256)"
    return None


def fa4_unsupported(config: AttentionConfig) -> str | None:
    return dtype_refusal(PEERS["fa4"], config) or fa4_head_dim_refusal(
        config.head_dim, _capability()
    )


# --- FlashInfer ------------------------------------------------------------------------------


_flashinfer_workspaces: dict[torch.device, torch.Tensor] = {}
_flashinfer_plans: collections.OrderedDict = collections.OrderedDict()


def _flashinfer_wrapper(q, k, causal):
    """A ragged-batch prefill wrapper planned for this dense shape: every sequence of the
    batch is `seq` long. Planned on the shape's first call, which the harness never times
    (the gate and the warm-up come first); kept for later calls."""
    b, s, heads, d = q.shape
    key = (q.device, b, s, heads, k.shape[2], d, q.dtype, bool(causal))
    if key in _flashinfer_plans:
        _flashinfer_plans.move_to_end(key)
        return _flashinfer_plans[key]
    flashinfer = load(PEERS["flashinfer"])
    if q.device not in _flashinfer_workspaces:
        _flashinfer_workspaces[q.device] = torch.empty(
            FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device
        )
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
        _flashinfer_workspaces[q.device], kv_layout="NHD"
    )
    indptr = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=q.device)
    wrapper.plan(
        indptr,
        indptr,
        heads,
        k.shape[2],
        d,
        causal=bool(causal),
        sm_scale=d**-0.5,
        q_data_type=q.dtype,
        kv_data_type=k.dtype,
    )
    _flashinfer_plans[key] = wrapper
    while len(_flashinfer_plans) > FLASHINFER_PLANS_KEPT:
        _flashinfer_plans.popitem(last=False)
    return wrapper


def flashinfer_run(q, k, v, causal):
    b, s, heads, d = q.shape
    wrapper = _flashinfer_wrapper(q, k, causal)
    out = wrapper.run(q.view(b * s, heads, d), k.flatten(0, 1), v.flatten(0, 1))
    return out.view(b, s, heads, -1)


def flashinfer_backend(q, k, v, causal) -> str:
    peer = PEERS["flashinfer"]
    return f"{peer.distribution}=={installed_version(peer)}:batch-prefill-ragged"


def flashinfer_unsupported(config: AttentionConfig) -> str | None:
    return dtype_refusal(PEERS["flashinfer"], config)


# --- the registry's entries ------------------------------------------------------------------


_ADAPTERS = {
    "xformers": (
        xformers_run,
        xformers_backend,
        xformers_unsupported,
        grouped_bmghk,
        grouped_to_bhsd,
    ),
    "fa4": (fa4_run, fa4_backend, fa4_unsupported, bshd, bhsd),
    "flashinfer": (flashinfer_run, flashinfer_backend, flashinfer_unsupported, bshd, bhsd),
}


def implementations() -> dict[str, PeerImplementation]:
    """One registry entry per peer of results_schema.peers."""
    entries = {}
    for name, peer in PEERS.items():
        run, backend_for, unsupported, to_native, from_native = _ADAPTERS[name]
        entries[name] = PeerImplementation(
            name,
            run,
            backend_for,
            lambda device, _peer=peer: availability(_peer, device),
            unsupported,
            to_native=to_native,
            from_native=from_native,
        )
    return entries
