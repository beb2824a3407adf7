"""The public peers' adapters (benches/peers.py), on the CPU, each against a stand-in module
that does what the peer documents, in plain torch and in the peer's own layout: xformers'
BMHK (and BMGHK for grouped-query attention), flash-attn's BSHD returning (out, lse),
flashinfer's ragged NHD batch wrapper. The stand-ins go into sys.modules under the peers'
names. The checks: inputs arrive in the native layout, the timed call converts nothing, the
gate passes them, a stand-in that reads the wrong layout or ignores causal fails it, and each
peer says why it cannot run where it cannot."""

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


STAND_INS = {"xformers": _xformers, "fa4": _fa4, "flashinfer": _flashinfer}


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
