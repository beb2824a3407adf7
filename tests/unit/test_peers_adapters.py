"""The public peers' adapters (benches/peers.py), on the CPU, each against a stand-in module
that does what the peer documents, in plain torch and in the peer's own layout: xformers'
BMHK (and BMGHK for grouped-query attention), flash-attn's BSHD returning (out, lse),
flashinfer's ragged NHD batch wrapper, cuDNN's frontend graph (tensors declared by dims and
strides, which its execute reads the caller's buffers through). The stand-ins go into
sys.modules under the peers' names. The checks: inputs arrive in the native layout, the timed
call converts nothing, the gate passes them, a stand-in that reads the wrong layout or ignores
causal fails it, and each peer says why it cannot run where it cannot."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from benches import correctness, peers, placement, registry, timing
from results_schema import AttentionConfig, Plan
from results_schema.peers import PEERS

CPU = torch.device("cpu")


class StandIns:
    """What the stand-ins saw, and whether one is running now (the op recorder leaves the
    stand-in's own arithmetic out: only the adapter's ops count)."""

    def __init__(self) -> None:
        self.layouts: list[tuple] = []
        self.active = 0
        self.plans = 0

    @contextlib.contextmanager
    def running(self, *tensors):
        self.layouts.append(tuple((tuple(t.shape), t.is_contiguous()) for t in tensors))
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1


def _bshd_attention(q, k, v, causal, scale, wrong_layout=False, ignore_causal=False):
    """Attention over [B, S, H, D] (k/v may have fewer heads); `wrong_layout` reads the
    tensors as [B, H, S, D], as a library handed the harness's layout by mistake would."""
    if wrong_layout:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    out = F.scaled_dot_product_attention(
        q, k, v, is_causal=causal and not ignore_causal, scale=scale
    )
    out = out.transpose(1, 2)
    return (out.transpose(1, 2) if wrong_layout else out).contiguous()


def _xformers(seen: StandIns, **faults) -> dict:
    ops = types.ModuleType("xformers.ops")

    class LowerTriangularMask:
        pass

    def memory_efficient_attention(
        query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None, output_dtype=None
    ):
        with seen.running(query, key, value):
            assert query.dim() in (4, 5) and key.shape == query.shape  # BMHK, or BMGHK
            causal = isinstance(attn_bias, LowerTriangularMask)
            flat = [t.reshape(*t.shape[:2], -1, t.shape[-1]) for t in (query, key, value)]
            out = _bshd_attention(*flat, causal, scale, **faults)
            return out.reshape(query.shape)

    ops.LowerTriangularMask = LowerTriangularMask
    ops.memory_efficient_attention = memory_efficient_attention
    root = types.ModuleType("xformers")
    root.__version__ = "0.0.35"
    root.ops = ops
    return {"xformers": root, "xformers.ops": ops}


def _fa4(seen: StandIns, **faults) -> dict:
    cute = types.ModuleType("flash_attn.cute")

    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False):
        with seen.running(q, k, v):
            return _bshd_attention(q, k, v, causal, softmax_scale, **faults), None

    cute.flash_attn_func = flash_attn_func
    root = types.ModuleType("flash_attn")
    root.__version__ = "4.0.0b36"
    root.cute = cute
    return {"flash_attn": root, "flash_attn.cute": cute}


def _flashinfer(seen: StandIns, **faults) -> dict:
    root = types.ModuleType("flashinfer")
    root.__version__ = "0.7.2.post1"

    class BatchPrefillWithRaggedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False):
            assert kv_layout == "NHD"

        def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, **kw):
            seen.plans += 1
            self.indptr = qo_indptr.tolist()
            self.causal, self.scale = kw.get("causal", False), kw.get("sm_scale")

        def run(self, q, k, v):
            with seen.running(q, k, v):
                assert q.dim() == 3 and q.shape[0] == self.indptr[-1]  # [tokens, heads, dim]
                parts = [
                    _bshd_attention(
                        *(t[None, a:b] for t in (q, k, v)), self.causal, self.scale, **faults
                    )[0]
                    for a, b in zip(self.indptr, self.indptr[1:], strict=False)
                ]
                return torch.cat(parts)

    root.BatchPrefillWithRaggedKVCacheWrapper = BatchPrefillWithRaggedKVCacheWrapper
    return {"flashinfer": root}


class _CudnnTensor:
    """A tensor declared to the stand-in graph: dims and strides in (b, h, s, d) order."""

    def __init__(self, name, dim, stride, data_type=None):
        self.name, self.dim, self.stride = name, list(dim), list(stride)
        self.output, self.data_type = False, data_type

    def set_output(self, value):
        self.output = value
        return self

    def set_dim(self, dim):
        self.dim = list(dim)
        return self

    def set_stride(self, stride):
        self.stride = list(stride)
        return self

    def set_data_type(self, data_type):
        self.data_type = data_type
        return self


def _cudnn(seen: StandIns, **faults) -> dict:
    """cuDNN's frontend as its graph API documents it: execute reads each buffer through the
    dims and strides declared for it (`wrong_layout`: as a contiguous [B, H, S, D] tensor
    instead, as a graph declared with the harness's layout would)."""
    root = types.ModuleType("cudnn")
    root.__version__ = "1.32.0"
    root.data_type = types.SimpleNamespace(
        HALF="half", BFLOAT16="bf16", FLOAT="float", FP8_E4M3="fp8_e4m3"
    )
    root.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    root.backend_version = lambda: 91900
    root.create_handle = lambda: types.SimpleNamespace(stream=None)
    root.graphs = []

    def set_stream(handle, stream):
        handle.stream = stream

    class pygraph:
        def __init__(self, io_data_type=None, handle=None, **kw):
            self.io, self.handle, self.steps, self.barred = io_data_type, handle, [], []
            self._plan_index = 0
            root.graphs.append(self)

        def tensor(self, name, dim, stride, data_type):
            return _CudnnTensor(name, dim, stride, data_type)

        def sdpa(self, name, q, k, v, generate_stats, attn_scale, use_causal_mask, **kw):
            assert generate_stats is False
            self.inputs, self.scale, self.causal = (q, k, v), attn_scale, use_causal_mask
            self.o = _CudnnTensor("O", q.dim[:3] + v.dim[3:], [])
            self.fp8 = None
            return self.o, None

        def sdpa_fp8(self, name, q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s,
                     scale_o, generate_stats, attn_scale, use_causal_mask, **kw):  # fmt: skip
            """The frontend's FP8 node (docs/operations/Attention.md): scores of the e4m3
            values times descale_q, descale_k and attn_scale; P scaled by scale_s, rounded to
            e4m3 and descaled by descale_s; P V times descale_v and scale_o; amax of S and of
            O written to outputs of their own."""
            scalars = (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)
            assert all(t.data_type == "float" and t.dim == [1, 1, 1, 1] for t in scalars)
            self.o, _ = self.sdpa(name, q, k, v, generate_stats, attn_scale, use_causal_mask)
            self.fp8 = (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)
            self.amax = (_CudnnTensor("amax_s", [], []), _CudnnTensor("amax_o", [], []))
            return self.o, None, *self.amax

        def _step(self, name):
            return lambda *a: self.steps.append(name)

        def __getattr__(self, name):
            if name in ("validate", "build_operation_graph", "check_support", "build_plans"):
                return self._step(name)
            if name == "create_execution_plans":
                return lambda modes: self.steps.append((name, tuple(modes)))
            raise AttributeError(name)

        def deselect_engines(self, names):
            self.barred = list(names)

        def get_workspace_size(self):
            return 256

        def get_plan_name_at_index(self, index):
            return "eng8_stand_in"

        def execute(self, pack, workspace, handle=None):
            assert self.steps[-1] == "build_plans" and handle is self.handle
            self.workspace = workspace
            q, k, v = (pack[t] for t in self.inputs)
            with seen.running(q, k, v):

                def read(buffer, declared):
                    if faults.get("wrong_layout"):
                        return buffer.reshape(declared.dim)
                    return buffer.as_strided(declared.dim, declared.stride)

                q, k, v = (read(pack[t], t) for t in self.inputs)
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
                causal = self.causal and not faults.get("ignore_causal")
                if self.fp8 is not None:
                    out = self._fp8_attention(pack, q, k, v, causal)
                else:
                    out = F.scaled_dot_product_attention(
                        q, k, v, is_causal=causal, scale=self.scale
                    )
                pack[self.o].as_strided(self.o.dim, self.o.stride).copy_(out)

        def _fp8_attention(self, pack, q, k, v, causal):
            assert all(pack[t].dtype == torch.float32 for t in self.fp8 + self.amax)
            dq, dk, dv, ds, ss, so = (float(pack[t]) for t in self.fp8)
            scores = q.float() @ k.float().mT * (dq * dk * self.scale)
            if causal:
                keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
                scores = scores.masked_fill(~keep, float("-inf"))
            # as a flash kernel: exponentials against the row's max, normalized after P V
            exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
            p = (exps * ss).to(torch.float8_e4m3fn).float() * ds
            dv = 1.0 if faults.get("ignore_descale_v") else dv
            out = p @ v.float() * dv * so / exps.sum(dim=-1, keepdim=True)
            pack[self.amax[0]].fill_(float(exps.max()))
            pack[self.amax[1]].fill_(float(out.abs().max()))
            return out.to(torch.bfloat16 if self.o.data_type == "bf16" else torch.float32)

    root.pygraph = pygraph
    root.set_stream = set_stream
    return {"cudnn": root}


STAND_INS = {"xformers": _xformers, "fa4": _fa4, "flashinfer": _flashinfer, "cudnn-fe": _cudnn}


@pytest.fixture
def stand_in(monkeypatch):
    """stand_in(name, **faults): the peer's stand-in in sys.modules and its registry entry
    usable on the CPU (its GPU check is tested on its own below)."""

    def install(name: str, **faults) -> StandIns:
        seen = StandIns()
        for module, value in STAND_INS[name](seen, **faults).items():
            monkeypatch.setitem(sys.modules, module, value)
        monkeypatch.setattr(peers, "_modules", {})
        monkeypatch.setattr(peers, "_flashinfer_plans", peers.collections.OrderedDict())
        monkeypatch.setattr(peers, "_cudnn_graphs", peers.collections.OrderedDict())
        monkeypatch.setattr(peers, "_cudnn_handles", {})
        impl = dataclasses.replace(registry.IMPLEMENTATIONS[name], available=lambda d: None)
        monkeypatch.setitem(registry.IMPLEMENTATIONS, name, impl)
        return seen

    return install


def _config(**changes) -> AttentionConfig:
    values = dict(
        name="c",
        batch=2,
        heads=4,
        kv_heads=2,
        seq_len=33,
        head_dim=16,
        dtype="bfloat16",
        causal=True,
    )
    return AttentionConfig(**{**values, **changes})


def _plan(name: str, config: AttentionConfig) -> Plan:
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate=name,
        compared_with=["sdpa-math"],
        reference="reference",
        samples_per_config=1,
        configs=[config],
    )


@pytest.mark.parametrize("name", list(STAND_INS))
@pytest.mark.parametrize("heads,kv_heads,causal", [(4, 4, False), (4, 2, True)])
def test_each_peer_passes_the_gate_in_its_own_layout(stand_in, name, heads, kv_heads, causal):
    seen = stand_in(name)
    config = _config(heads=heads, kv_heads=kv_heads, causal=causal)
    row, sdpa = correctness.check_config("r", config, _plan(name, config), 0, CPU)
    assert sdpa.passed and row.passed, (row, sdpa)
    version = peers.installed_version(PEERS[name])
    assert row.backend.startswith(f"{PEERS[name].distribution}=={version}")
    lengths = {config.seq_len, *correctness.AWKWARD_SEQ_LENS}
    assert {layout[0] for layout in seen.layouts} == {
        (_native_q_shape(name, config, n), True) for n in lengths
    }


def _native_q_shape(name: str, config: AttentionConfig, seq_len: int) -> tuple:
    b, h, g, d = config.batch, config.heads, config.key_heads, config.head_dim
    if name == "flashinfer":
        return (b * seq_len, h, d)
    if name == "xformers" and g != h:
        return (b, seq_len, g, h // g, d)
    return (b, seq_len, h, d)


@pytest.mark.parametrize(
    "name,fault",
    [
        ("xformers", "wrong_layout"),
        ("fa4", "wrong_layout"),
        ("fa4", "ignore_causal"),
        ("flashinfer", "ignore_causal"),
        ("cudnn-fe", "wrong_layout"),
        ("cudnn-fe", "ignore_causal"),
    ],
)
def test_a_stand_in_that_is_wrong_fails_the_gate(stand_in, name, fault):
    stand_in(name, **{fault: True})
    config = _config(heads=4, kv_heads=4)
    row, sdpa = correctness.check_config("r", config, _plan(name, config), 0, CPU)
    assert sdpa.passed and not row.passed
    assert row.message.startswith("max error "), row.message


COPIES = {"transpose", "permute", "clone", "copy_", "_to_copy", "cat", "repeat_interleave"}


class AdapterOps(TorchDispatchMode):
    """The aten ops run while no stand-in runs: the adapter's own work in a timed call."""

    def __init__(self, seen: StandIns) -> None:
        super().__init__()
        self.seen, self.ops = seen, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.seen.active:
            self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STAND_INS))
def test_a_timed_call_converts_nothing(stand_in, name):
    seen = stand_in(name)
    config = _config()
    inputs = correctness.make_inputs(config, CPU, 0)
    impl = registry.get(name)
    rng = np.random.default_rng(0)
    built = {name: placement.Placement(timing.CpuClock(), impl, inputs, True, "single", 1, rng)}
    built[name].sample()  # the shape's first call: flashinfer plans it (the harness warms up)
    recorder = AdapterOps(seen)
    with recorder:
        for _ in range(3):
            built[name].sample()
    assert len(seen.layouts) == 4
    assert not COPIES & set(recorder.ops), recorder.ops
    expected = correctness.reference_output(_plan(name, config), config, inputs)
    out = built[name].last_output()
    assert out.shape == expected.shape
    assert float((out.double() - expected).abs().max()) < 0.05


# --- why a peer cannot run -------------------------------------------------------------------


def _on_gpu(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    return torch.device("cuda")


def test_a_peer_needs_a_cuda_gpu():
    for name in PEERS:
        assert registry.get(name).available(CPU) == "needs a CUDA GPU"


def test_fa4_on_an_l4_is_unsupported_on_sm_89(monkeypatch):
    device = _on_gpu(monkeypatch, (8, 9))
    assert registry.get("fa4").available(device) == (
        "unsupported on sm_89 (fa4 supports Hopper and Blackwell GPUs)"
    )
    assert registry.get("xformers").available(device) != registry.get("fa4").available(device)


def test_a_failed_install_on_the_target_is_the_peers_reason(monkeypatch, tmp_path):
    device = _on_gpu(monkeypatch, (9, 0))
    monkeypatch.setattr(peers, "INSTALL_FAILED_DIR", tmp_path)
    (tmp_path / "xformers.failed").write_text("ERROR: No matching distribution found\n")
    assert registry.get("xformers").available(device) == (
        "unavailable: xformers not installed (pip install failed: ERROR: No matching "
        "distribution found; see logs/peers.log)"
    )


def test_a_peer_not_installed_locally_says_what_to_install(monkeypatch):
    device = _on_gpu(monkeypatch, (9, 0))
    monkeypatch.setattr(peers, "_modules", {})
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import fails: not installed
    assert registry.get("flashinfer").available(device) == (
        "unavailable: flashinfer-python not installed "
        "(install flashinfer-python==0.7.2.post1 to time it locally)"
    )


def test_a_peer_whose_import_breaks_says_how(monkeypatch, tmp_path):
    device = _on_gpu(monkeypatch, (9, 0))
    package = tmp_path / "flash_attn" / "cute"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise OSError('libcuda.so.1: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("flash_attn", "flash_attn.cute"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(peers, "_modules", {})
    assert registry.get("fa4").available(device) == (
        "unavailable: import of flash_attn.cute failed: OSError: libcuda.so.1: cannot open"
    )


@pytest.mark.parametrize(
    "name,dtype,expected",
    [
        ("fa4", "float32", "unsupported: dtype float32 (fa4 takes float16, bfloat16)"),
        (
            "flashinfer",
            "float32",
            "unsupported: dtype float32 (flashinfer takes float16, bfloat16)",
        ),
        (
            "xformers",
            "float64",
            "unsupported: dtype float64 (xformers takes float16, bfloat16, float32)",
        ),
        ("xformers", "float32", None),
    ],
)
def test_dtypes_outside_a_peer_are_unsupported(name, dtype, expected):
    assert registry.get(name).unsupported(_config(dtype=dtype)) == expected


@pytest.mark.parametrize(
    "head_dim,capability,expected",
    [
        (128, (9, 0), None),
        (256, (9, 0), None),
        (192, (10, 0), "unsupported: head_dim 192 (fa4 on sm_10x takes 8 to 128, or 256)"),
        (256, (10, 0), None),
        (100, (9, 0), "unsupported: head_dim 100 (fa4 needs a multiple of 8)"),
    ],
)
def test_fa4_head_dims_follow_its_own_limits(head_dim, capability, expected):
    assert peers.fa4_head_dim_refusal(head_dim, capability) == expected


def test_the_gate_reports_an_unsupported_dtype_as_its_row(stand_in):
    stand_in("fa4")
    config = _config(dtype="float32")
    row, _ = correctness.check_config("r", config, _plan("fa4", config), 0, CPU)
    assert not row.passed and row.backend == "unavailable"
    assert row.message == "unsupported: dtype float32 (fa4 takes float16, bfloat16)"


# --- cudnn-fe: one graph per shape, built once ------------------------------------------------


def _cudnn_call(config: AttentionConfig, seed: int = 0):
    impl = registry.get("cudnn-fe")
    native = impl.native_inputs(correctness.make_inputs(config, CPU, seed))
    return native, impl.run(*native, config.causal)


def test_cudnn_fe_builds_a_shapes_graph_once_and_executes_it_with_one_workspace(stand_in):
    stand_in("cudnn-fe")
    cudnn = sys.modules["cudnn"]
    config = _config(heads=8, kv_heads=2, seq_len=40, head_dim=16)
    native, first = _cudnn_call(config, 0)
    _, second = _cudnn_call(config, 1)  # new buffers, same shapes and strides
    assert len(cudnn.graphs) == 1
    graph = cudnn.graphs[0]
    assert graph.steps == [
        "validate",
        "build_operation_graph",
        ("create_execution_plans", ("A", "FALLBACK")),
        "check_support",
        "build_plans",
    ]
    assert graph.barred == ["sdpa_fwd_prefill"]  # the frontend's own DSL engines are not cuDNN
    assert (
        graph.workspace.numel() == 256
        and graph.workspace
        is peers._cudnn_graphs[peers.cudnn_graph_key(*native, config.causal)].workspace
    )
    assert first.data_ptr() != second.data_ptr()  # a new output each call
    b, s, h, d = native[0].shape
    q, k, _ = graph.inputs
    assert (q.dim, q.stride) == ([b, h, s, d], [s * h * d, d, h * d, 1])  # BSHD memory
    assert (k.dim, k.stride) == ([b, 2, s, d], [s * 2 * d, d, 2 * d, 1])  # fewer k/v heads
    assert (graph.o.dim, graph.o.stride) == ([b, h, s, d], [s * h * d, d, h * d, 1])
    assert graph.scale == d**-0.5 and graph.causal is True


@pytest.mark.parametrize(
    "change",
    [{"causal": False}, {"kv_heads": 4}, {"seq_len": 41}, {"head_dim": 8}, {"dtype": "float16"}],
)
def test_cudnn_fe_builds_another_graph_for_any_other_shape_or_mask(stand_in, change):
    stand_in("cudnn-fe")
    config = _config(heads=8, kv_heads=2, seq_len=40, head_dim=16)
    native, _ = _cudnn_call(config)
    other_native, _ = _cudnn_call(_config(**{**config.model_dump(), **change}))
    other_causal = change.get("causal", config.causal)
    assert peers.cudnn_graph_key(*native, config.causal) != peers.cudnn_graph_key(
        *other_native, other_causal
    )
    assert len(sys.modules["cudnn"].graphs) == 2


def test_cudnn_fe_keeps_a_bounded_number_of_graphs(stand_in, monkeypatch):
    stand_in("cudnn-fe")
    monkeypatch.setattr(peers, "CUDNN_GRAPHS_KEPT", 2)
    for seq_len in (30, 31, 32, 30):
        _cudnn_call(_config(seq_len=seq_len))
    assert len(peers._cudnn_graphs) == 2
    assert len(sys.modules["cudnn"].graphs) == 4  # S=30 was evicted, then built again


def test_cudnn_fe_names_the_frontend_the_cudnn_library_and_the_engine(stand_in):
    stand_in("cudnn-fe")
    native, _ = _cudnn_call(_config())
    assert registry.get("cudnn-fe").backend_for(*native, True) == (
        "nvidia-cudnn-frontend==1.32.0:cudnn==9.19.0:eng8_stand_in"
    )


@pytest.mark.parametrize(
    "version,expected",
    [(91900, "9.19.0"), (90100, "9.1.0"), (92001, "9.20.1"), (8907, "8.9.7"), (8600, "8.6.0")],
)
def test_cudnn_versions_read_as_their_releases(version, expected):
    assert peers.cudnn_version_string(version) == expected


def test_cudnn_fe_without_a_cudnn_library_says_so(stand_in, monkeypatch):
    stand_in("cudnn-fe")  # the stand-in's entry skips the availability check: the real one
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "cudnn-fe", peers.implementations()["cudnn-fe"])

    def missing():
        raise RuntimeError("Unable to find symbol cudnnGetVersion")

    monkeypatch.setattr(sys.modules["cudnn"], "backend_version", missing)
    device = _on_gpu(monkeypatch, (9, 0))
    assert registry.get("cudnn-fe").available(device) == (
        "unavailable: nvidia-cudnn-frontend found no cuDNN library "
        "(RuntimeError: Unable to find symbol cudnnGetVersion)"
    )


def test_cudnn_fe_needs_ampere_and_says_what_to_install(monkeypatch):
    assert registry.get("cudnn-fe").available(_on_gpu(monkeypatch, (7, 5))) == (
        "unsupported on sm_75 (cudnn-fe supports SM80 (Ampere) or newer)"
    )
    monkeypatch.setattr(peers, "_modules", {})
    monkeypatch.setitem(sys.modules, "cudnn", None)
    assert registry.get("cudnn-fe").available(_on_gpu(monkeypatch, (9, 0))) == (
        "unavailable: nvidia-cudnn-frontend not installed "
        "(install nvidia-cudnn-frontend==1.32.0 to time it locally)"
    )


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"head_dim": 256}, None),
        ({"head_dim": 64, "dtype": "float16"}, None),
        ({"head_dim": 100}, "unsupported: head_dim 100 (cudnn-fe takes multiples of 8 up to 256)"),
        (
            {"dtype": "float32"},
            "unsupported: dtype float32 (cudnn-fe takes float16, bfloat16, float8_e4m3fn)",
        ),
        ({"dtype": "float8_e4m3fn", "head_dim": 128}, None),  # off the GPU: no capability
        (
            {"dtype": "float8_e4m3fn", "head_dim": 72},
            "unsupported: head_dim 72 (cudnn-fe takes multiples of 16 up to 256 in FP8)",
        ),
    ],
)
def test_cudnn_fe_takes_cudnns_head_dims_and_16_bit_dtypes(changes, expected):
    assert registry.get("cudnn-fe").unsupported(_config(**changes)) == expected


@pytest.mark.parametrize(
    "capability,refused", [((8, 9), True), ((9, 0), True), ((10, 0), False), ((12, 0), False)]
)
def test_cudnn_fe_takes_fp8_configs_where_cudnn_writes_a_bfloat16_output(
    monkeypatch, capability, refused
):
    """On an H200 cuDNN 9.19 declined every FP8 SDPA graph with a bfloat16 output ("only
    supported on Blackwell architecture"): the row says why before a graph is built, where
    each FP8 row failed with the library's error."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = registry.get("cudnn-fe").unsupported(_config(dtype="float8_e4m3fn", head_dim=128))
    if refused:
        sm = f"sm_{capability[0]}{capability[1]}"
        assert reason == (
            f"unsupported on {sm}: cuDNN's FP8 SDPA writes a bfloat16 output on Blackwell "
            "(sm_100) and newer only; below, e4m3"
        )
    else:
        assert reason is None


@pytest.mark.parametrize("causal", [True, False])
def test_cudnn_fe_times_cudnns_fp8_graph_with_the_callers_descales(stand_in, causal):
    """An FP8 config builds the frontend's FP8 SDPA node: the harness's descales bound at
    each call, P's scale and descale fixed (2^8 and 2^-8), a bfloat16 output; it passes the
    FP8 gate, and the same graph ignoring v's descale fails it."""
    stand_in("cudnn-fe")
    config = _config(dtype="float8_e4m3fn", head_dim=32, causal=causal)
    rows = correctness.check_config("r", config, _plan("cudnn-fe", config), 0, CPU)
    row = next(r for r in rows if r.implementation == "cudnn-fe")
    assert row.passed, row.message
    sdpa = next(r for r in rows if r.implementation == "sdpa-math")
    assert sdpa.message.startswith("unsupported: dtype float8_e4m3fn (torch's SDPA")
    built = next(iter(peers._cudnn_graphs.values()))
    assert built.out_dtype == torch.bfloat16 and set(built.descales) == {
        "q_descale",
        "k_descale",
        "v_descale",
    }
    fixed = {t.name: float(value) for t, value in built.fixed.items()}
    assert fixed["scale_s"] == 256.0 and fixed["descale_s"] == 1 / 256 and fixed["scale_o"] == 1


def test_cudnn_fe_fp8_without_v_descale_fails_the_gate(stand_in):
    stand_in("cudnn-fe", ignore_descale_v=True)
    config = _config(dtype="float8_e4m3fn", head_dim=32)
    rows = correctness.check_config("r", config, _plan("cudnn-fe", config), 0, CPU)
    row = next(r for r in rows if r.implementation == "cudnn-fe")
    assert not row.passed and "over tolerance" in row.message
