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
    cudnn-fe    cuDNN's SDPA through its frontend's graph API (`import cudnn`): BSHD memory
                declared to cuDNN as (b, h, s, d) dims with BSHD strides, grouped-query
                attention native (fewer k/v heads); one graph per shape, built on the
                shape's first call (untimed: validate, heuristics, plan build) with its
                workspace, so a call is the graph's execute and an output allocation

A peer says why it cannot run before any call: no CUDA GPU, a GPU older than its documented
support ("unsupported on sm_89"), its install failed on the target (the startup script's
peers partial leaves `peer-installs/<name>.failed` beside benches/), or it is not installed
(the local backend installs nothing into the user's environment). A config outside its
dtypes or head dims is "unsupported: ...". Every row's backend names the installed version.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benches import fp8
from benches.implementation import Implementation
from results_schema.peers import PEERS, Peer

if TYPE_CHECKING:
    from results_schema import AttentionConfig

INSTALL_FAILED_DIR = Path(__file__).resolve().parent.parent / "peer-installs"
PEERS_LOG = "logs/peers.log"  # where the run's logs keep the install's output
FLASHINFER_WORKSPACE_BYTES = 128 << 20  # flashinfer's recommended float workspace
FLASHINFER_PLANS_KEPT = 8  # wrappers kept: each holds its own int workspace and pinned buffer
CUDNN_GRAPHS_KEPT = 32  # built graphs kept: a config's gate alone builds three (S, 127, 129)
# The frontend's own CuTe DSL engines (FROST: 1.32.0 ranks one for sm_90 ahead of the library's)
# are not cuDNN: the rows name the cuDNN library's version, so only its engines may serve.
CUDNN_FRONTEND_ENGINES = ("sdpa_fwd_prefill",)


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


def one_line(error: Exception) -> str:
    """An exception as one short line, for a row's reason."""
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]


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
        return f"unavailable: import of {peer.module} failed: {one_line(error)}"
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


# --- cuDNN through its frontend's graph API ----------------------------------------------------


# cuDNN's FP8 SDPA (the frontend's sdpa_fp8): P in [0, 1] is scaled by scale_s before its
# rounding to e4m3 and descaled after, as FlashAttention-3 scales it (benches/fp8.py, P_SCALE);
# the output is bfloat16, so its scale is 1. Blackwell and newer: on an H200 (cuDNN 9.19,
# 2026-11-29) the library declined every such graph, "sdpa fp8 forward with HALF/BFLOAT16
# output is only supported on Blackwell architecture with cuDNN version 9.13.0 and newer";
# Hopper's FP8 SDPA writes e4m3, which the contract's bfloat16 output (docs/kernel-contract.md,
# FP8) does not take, so the peer says so on Hopper instead of failing every row.
CUDNN_FP8_MIN_CAPABILITY = (10, 0)
CUDNN_IO_TYPES = {torch.float16: "HALF", torch.bfloat16: "BFLOAT16", fp8.E4M3: "FP8_E4M3"}


@dataclass(frozen=True)
class CudnnGraph:
    """One built SDPA graph: its tensors (what execute binds the caller's buffers to), its
    workspace, allocated once, and the engine the plan walk built. An FP8 graph also binds
    `fixed`: its constant scales and its amax outputs, device tensors made once with it,
    and takes the caller's descales (`descales`: the graph's tensor of each keyword)."""

    graph: object
    q: object
    k: object
    v: object
    o: object
    out_shape: tuple[int, ...]  # BSHD, v's head dim
    workspace: torch.Tensor
    handle: object
    engine: str
    out_dtype: torch.dtype
    descales: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)


_cudnn_graphs: collections.OrderedDict = collections.OrderedDict()
_cudnn_handles: dict[torch.device, object] = {}


def cudnn_graph_key(q, k, v, causal) -> tuple:
    """What a built graph is good for: the device, dtype, every shape and stride it was
    declared with, and the mask. Two calls with the same key execute the same graph."""
    return (
        q.device,
        q.dtype,
        *((tuple(t.shape), tuple(t.stride())) for t in (q, k, v)),
        bool(causal),
    )


def cudnn_version_string(version: int) -> str:
    """cudnnGetVersion()'s integer as the release it names: 91900 -> '9.19.0' (cuDNN 9 on:
    major*10000 + minor*100 + patch), 8907 -> '8.9.7' (cuDNN 8: major*1000 + minor*100)."""
    if version >= 90000:
        return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return f"{version // 1000}.{version // 100 % 10}.{version % 100}"


def cudnn_library_version() -> str:
    """The version of the cuDNN library the frontend loaded (the backend that runs)."""
    return cudnn_version_string(int(load(PEERS["cudnn-fe"]).backend_version()))


def _cudnn_handle(device: torch.device):
    """One cuDNN handle per device, created on that device (it keeps its stream: see
    cudnn_fe_run)."""
    if device not in _cudnn_handles:
        cudnn = load(PEERS["cudnn-fe"])
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            _cudnn_handles[device] = cudnn.create_handle()
    return _cudnn_handles[device]


def _bhsd_geometry(t: torch.Tensor) -> tuple[list[int], list[int]]:
    """A [B, S, H, D] tensor's dims and strides in the (b, h, s, d) order cuDNN's SDPA
    declares its tensors in (the memory stays BSHD)."""
    (b, s, h, d), (sb, ss, sh, sd) = t.shape, t.stride()
    return [b, h, s, d], [sb, sh, ss, sd]


def _cudnn_build(q, k, v, causal) -> CudnnGraph:
    """Build the SDPA graph for these tensors' shapes and strides: the frontend's documented
    sequence (validate, build_operation_graph, heuristics A then FALLBACK, check_support,
    build_plans), the frontend's own DSL engines left out, and the workspace it asks for."""
    cudnn = load(PEERS["cudnn-fe"])
    is_fp8 = q.dtype == fp8.E4M3
    io_type = getattr(cudnn.data_type, CUDNN_IO_TYPES[q.dtype])
    out_type = cudnn.data_type.BFLOAT16 if is_fp8 else io_type
    handle = _cudnn_handle(q.device)
    graph = cudnn.pygraph(
        io_data_type=io_type,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    declared = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        dims, strides = _bhsd_geometry(t)
        declared[name] = graph.tensor(name=name, dim=dims, stride=strides, data_type=io_type)
    out_shape = (*q.shape[:3], v.shape[-1])
    common = dict(
        q=declared["q"],
        k=declared["k"],
        v=declared["v"],
        generate_stats=False,  # inference: no softmax statistics written
        attn_scale=q.shape[-1] ** -0.5,
        use_causal_mask=bool(causal),  # top-left, the harness's bottom-right where S_q = S_kv
    )
    descales, fixed = {}, {}
    if is_fp8:
        o, descales, fixed = _cudnn_fp8_sdpa(cudnn, graph, common, q.device)
    else:
        o, _stats = graph.sdpa(name="sdpa", **common)
    b, s, heads, dv = out_shape  # a new contiguous BSHD tensor at every call
    o.set_output(True).set_dim([b, heads, s, dv]).set_stride([s * heads * dv, dv, heads * dv, 1])
    o.set_data_type(out_type)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.deselect_engines(list(CUDNN_FRONTEND_ENGINES))
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device=q.device)
    return CudnnGraph(
        graph,
        *declared.values(),
        o,
        out_shape,
        workspace,
        handle,
        _cudnn_engine(graph),
        fp8.OUTPUT_DTYPE if is_fp8 else q.dtype,
        descales,
        fixed,
    )


def _cudnn_fp8_sdpa(cudnn, graph, common: dict, device) -> tuple[object, dict, dict]:
    """The frontend's FP8 SDPA node (sdpa_fp8, as its own tests build it): a float32
    (1, 1, 1, 1) tensor per descale and scale; the amax of S and of O are outputs it must
    write somewhere. Returns the output, the descales' tensors by keyword, and the fixed
    tensors (graph tensor -> device tensor) every execute binds."""

    def scalar(name):
        one = [1, 1, 1, 1]
        return graph.tensor(name=name, dim=one, stride=one, data_type=cudnn.data_type.FLOAT)

    descales = {name: scalar(name) for name in fp8.DESCALE_NAMES}
    scale_s, descale_s, scale_o = scalar("scale_s"), scalar("descale_s"), scalar("scale_o")
    o, _stats, amax_s, amax_o = graph.sdpa_fp8(
        name="sdpa_fp8",
        descale_q=descales["q_descale"],
        descale_k=descales["k_descale"],
        descale_v=descales["v_descale"],
        descale_s=descale_s,
        scale_s=scale_s,
        scale_o=scale_o,
        **common,
    )
    for amax in (amax_s, amax_o):
        amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1])
        amax.set_data_type(cudnn.data_type.FLOAT)

    def value(x: float) -> torch.Tensor:
        return torch.full((1,), x, dtype=torch.float32, device=device)

    fixed = {
        scale_s: value(fp8.P_SCALE),
        descale_s: value(1.0 / fp8.P_SCALE),
        scale_o: value(1.0),  # a bfloat16 output is not scaled
        amax_s: value(0.0),
        amax_o: value(0.0),
    }
    return o, descales, fixed


def _cudnn_engine(graph) -> str:
    """The name of the plan the walk built, where the frontend says (1.32's graph keeps the
    index of the plan it built; an older frontend's graph does not): naming only."""
    index = getattr(graph, "_plan_index", None)
    if index is None:
        return ""
    try:
        return str(graph.get_plan_name_at_index(index))[:80]
    except Exception:
        return ""


def cudnn_graph(q, k, v, causal) -> CudnnGraph:
    """The built graph for these tensors: from the cache, else built now (the shape's first
    call, which the harness never times: the gate and the warm-up come first)."""
    key = cudnn_graph_key(q, k, v, causal)
    if key in _cudnn_graphs:
        _cudnn_graphs.move_to_end(key)
        return _cudnn_graphs[key]
    built = _cudnn_build(q, k, v, causal)
    _cudnn_graphs[key] = built
    while len(_cudnn_graphs) > CUDNN_GRAPHS_KEPT:
        _cudnn_graphs.popitem(last=False)
    return built


def cudnn_fe_run(q, k, v, causal, **descales):
    """One execute of the shape's graph on the current stream, into a new BSHD output (FP8:
    the caller's q_descale, k_descale, v_descale bound to the graph's, a bfloat16 output)."""
    built = cudnn_graph(q, k, v, causal)
    cudnn = load(PEERS["cudnn-fe"])
    out = torch.empty(built.out_shape, dtype=built.out_dtype, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else 0
    cudnn.set_stream(built.handle, stream)  # the frontend skips the call when it is unchanged
    variant = {built.q: q, built.k: k, built.v: v, built.o: out, **built.fixed}
    if set(descales) != set(built.descales):
        raise TypeError(
            f"cudnn-fe: takes descales {sorted(built.descales)}, got {sorted(descales)}"
        )
    variant.update({built.descales[name]: value for name, value in descales.items()})
    built.graph.execute(variant, built.workspace, handle=built.handle)
    return out


def cudnn_fe_backend(q, k, v, causal) -> str:
    """The frontend's version, the cuDNN library's, and the engine that serves the shape."""
    peer = PEERS["cudnn-fe"]
    name = f"{peer.distribution}=={installed_version(peer)}"
    try:
        name += f":cudnn=={cudnn_library_version()}"
    except Exception as error:  # no cuDNN found: the call itself fails and says so
        return f"{name}:cudnn==unknown ({one_line(error)})"
    try:
        engine = cudnn_graph(q, k, v, causal).engine
    except Exception:  # naming only: a graph cuDNN cannot build fails the call itself
        return name
    return f"{name}:{engine}" if engine else name


def cudnn_fe_unsupported(config: AttentionConfig) -> str | None:
    """cuDNN's SDPA support matrix (cuDNN frontend docs, Attention): prefill fp16/bf16 with
    head dims up to 256; the tensors' 16-byte alignment asks for a multiple of 8 (of 16 in
    FP8's one-byte elements); FP8 (a bfloat16 output) on Blackwell and newer."""
    refusal = dtype_refusal(PEERS["cudnn-fe"], config)
    multiple = 16 if fp8.is_fp8(config.dtype) else 8
    if refusal is None and (config.head_dim % multiple or config.head_dim > 256):
        refusal = (
            f"unsupported: head_dim {config.head_dim} (cudnn-fe takes multiples of "
            f"{multiple} up to 256{' in FP8' if multiple == 16 else ''})"
        )
    capability = _capability()
    if refusal is None and fp8.is_fp8(config.dtype) and capability is not None:
        if capability < CUDNN_FP8_MIN_CAPABILITY:
            refusal = (
                f"unsupported on sm_{capability[0]}{capability[1]}: cuDNN's FP8 SDPA writes a "
                "bfloat16 output on Blackwell (sm_100) and newer only; below, e4m3"
            )
    return refusal


def cudnn_fe_available(device: torch.device) -> str | None:
    """The peer's checks, then whether the frontend found a cuDNN library to run."""
    peer = PEERS["cudnn-fe"]
    reason = availability(peer, device)
    if reason is not None:
        return reason
    try:
        cudnn_library_version()
    except Exception as error:
        return f"unavailable: {peer.distribution} found no cuDNN library ({one_line(error)})"
    return None


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
    "cudnn-fe": (cudnn_fe_run, cudnn_fe_backend, cudnn_fe_unsupported, bshd, bhsd),
}
# A peer whose availability asks more than availability() does.
_AVAILABILITY = {"cudnn-fe": cudnn_fe_available}


def implementations() -> dict[str, PeerImplementation]:
    """One registry entry per peer of results_schema.peers."""
    entries = {}
    for name, peer in PEERS.items():
        run, backend_for, unsupported, to_native, from_native = _ADAPTERS[name]
        entries[name] = PeerImplementation(
            name,
            run,
            backend_for,
            _AVAILABILITY.get(name, lambda device, _peer=peer: availability(_peer, device)),
            unsupported,
            to_native=to_native,
            from_native=from_native,
        )
    return entries
