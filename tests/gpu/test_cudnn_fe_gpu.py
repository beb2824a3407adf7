"""cudnn-fe on a real GPU: cuDNN's SDPA through its frontend's graph API (benches/peers.py).
Its output against SDPA's math path in float64 on MHA, GQA and MQA shapes, causal and not,
head dims 64/128/256, both 16-bit dtypes, within the gate's own tolerance; the whole gate on
a few (awkward lengths and the CUDA-graph probe included); the versions its rows name
against the libraries that ran; one graph per shape, executed on the caller's stream. On
Hopper, its FP8 graph against the FP8 rule (float64 on the dequantized inputs), the whole
gate on FP8 configs beside SDPA's "no FP8 path" row, and the descales read at each call.

Skipped without a CUDA GPU, without the `cudnn` module (nvidia-cudnn-frontend) or where the
peer says it cannot run (its reason is the skip's)."""

from __future__ import annotations

from importlib import metadata

import pytest
import torch
import torch.nn.functional as F

from benches import correctness, peers, registry
from results_schema import AttentionConfig, Plan

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DEVICE = torch.device("cuda")

# (batch, heads, kv_heads, seq_len, head_dim, dtype, causal)
SHAPES = [
    (2, 8, 8, 256, 64, "float16", False),
    (2, 8, 8, 256, 64, "bfloat16", True),
    (1, 16, 4, 1024, 128, "bfloat16", False),  # GQA 4:1
    (1, 16, 4, 1024, 128, "bfloat16", True),
    (2, 8, 1, 333, 128, "float16", True),  # MQA, a length no tile divides
    (1, 8, 2, 512, 256, "bfloat16", False),
    (1, 8, 2, 512, 256, "float16", True),
    (3, 4, 4, 129, 64, "bfloat16", True),
]


@pytest.fixture(scope="module")
def cudnn():
    try:
        import cudnn as frontend
    except Exception as error:  # not installed, or its import broke: the reason is the skip's
        pytest.skip(f"nvidia-cudnn-frontend is not importable: {peers.one_line(error)}")
    reason = registry.get("cudnn-fe").available(DEVICE)
    if reason is not None:
        pytest.skip(reason)
    return frontend


def _config(shape) -> AttentionConfig:
    batch, heads, kv_heads, seq_len, head_dim, dtype, causal = shape
    return AttentionConfig(
        name=f"b{batch}h{heads}g{kv_heads}s{seq_len}d{head_dim}{dtype}{'c' if causal else ''}",
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        seq_len=seq_len,
        head_dim=head_dim,
        dtype=dtype,
        causal=causal,
    )


def _math_float64(q, k, v, causal) -> torch.Tensor:
    """torch's SDPA math path on float64 copies: the yardstick."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=True
        )


@pytest.mark.parametrize("shape", SHAPES, ids=[_config(s).name for s in SHAPES])
def test_cudnn_fe_matches_float64_attention_within_the_gates_tolerance(cudnn, shape):
    config = _config(shape)
    impl = registry.get("cudnn-fe")
    assert impl.unsupported(config) is None
    inputs = correctness.make_inputs(config, DEVICE, 7)
    out = impl.bhsd_output(impl.run(*impl.native_inputs(inputs), config.causal))
    torch.cuda.synchronize()
    ref = _math_float64(*inputs, config.causal)
    assert out.shape == ref.shape and out.dtype == inputs[0].dtype
    assert bool(torch.isfinite(out).all())
    error = float((out.double() - ref).abs().max())
    tolerance = correctness.max_error_tolerance(config, inputs, ref)
    assert error <= tolerance, f"max error {error:.3g} > {tolerance:.3g}"


def _plan(config: AttentionConfig) -> Plan:
    return Plan(
        name="cudnn-fe-gpu",
        description="",
        device="cuda",
        candidate="cudnn-fe",
        compared_with=["sdpa-cudnn"],
        reference="reference",
        samples_per_config=1,
        configs=[config],
    )


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[3], SHAPES[5]], ids=["mha", "gqa", "d256"])
def test_cudnn_fe_passes_the_whole_gate(cudnn, shape):
    """The harness's gate: two calls on fresh inputs (unchanged inputs, a new output each),
    S = 127 and 129 too, and the CUDA-graph probe (captured, poisoned, replayed)."""
    config = _config(shape)
    rows = correctness.check_config("r", config, _plan(config), 0, DEVICE)
    row = next(r for r in rows if r.implementation == "cudnn-fe")
    assert row.passed, row.message
    assert row.backend.startswith("nvidia-cudnn-frontend=="), row.backend


def test_rows_name_the_frontend_and_the_cudnn_library_that_ran(cudnn):
    config = _config(SHAPES[2])
    impl = registry.get("cudnn-fe")
    native = impl.native_inputs(correctness.make_inputs(config, DEVICE, 0))
    label = impl.backend_for(*native, config.causal)
    frontend = metadata.version("nvidia-cudnn-frontend")
    assert frontend == cudnn.__version__
    library = peers.cudnn_version_string(int(cudnn.backend_version()))
    assert label.startswith(f"nvidia-cudnn-frontend=={frontend}:cudnn=={library}"), label
    assert library.split(".")[0] == "9", library  # SDPA through the graph API: cuDNN 9
    # The frontend runs the cuDNN torch loaded: "vs sdpa-cudnn" compares one library.
    assert int(cudnn.backend_version()) == torch.backends.cudnn.version()
    built = peers.cudnn_graph(*native, config.causal)
    if hasattr(built.graph, "selected_engine"):  # 1.32's graph: None is the cuDNN library
        assert built.graph.selected_engine is None, built.graph.selected_engine


def test_a_shapes_graph_is_built_once_and_run_on_the_callers_stream(cudnn, monkeypatch):
    config = _config(SHAPES[4])
    impl = registry.get("cudnn-fe")
    inputs = correctness.make_inputs(config, DEVICE, 3)
    native = impl.native_inputs(inputs)
    impl.run(*native, config.causal)  # builds (or finds) the graph
    built = peers.cudnn_graph(*native, config.causal)

    def no_build(*args):
        raise AssertionError("a second call built its graph again")

    monkeypatch.setattr(peers, "_cudnn_build", no_build)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = impl.run(*impl.native_inputs(inputs), config.causal)
    side.synchronize()
    assert peers.cudnn_graph(*native, config.causal) is built  # same graph, same workspace
    if hasattr(built.handle, "stream"):  # 1.32's Handle remembers its stream
        assert built.handle.stream == side.cuda_stream
    ref = _math_float64(*inputs, config.causal)
    error = float((impl.bhsd_output(out).double() - ref).abs().max())
    assert error <= correctness.max_error_tolerance(config, inputs, ref)


# --- FP8 (e4m3): cuDNN's FP8 SDPA graph ----------------------------------------------------------

FP8_SHAPES = [
    (1, 16, 16, 1024, 128, "float8_e4m3fn", False),
    (1, 16, 16, 1024, 128, "float8_e4m3fn", True),
    (1, 16, 4, 2048, 128, "float8_e4m3fn", False),  # GQA 4:1
    (2, 8, 8, 512, 256, "float8_e4m3fn", False),
    (2, 8, 2, 512, 256, "float8_e4m3fn", True),
]


@pytest.fixture(scope="module")
def hopper(cudnn):
    if torch.cuda.get_device_capability() < peers.CUDNN_FP8_MIN_CAPABILITY:
        pytest.skip("cuDNN's FP8 SDPA with a bfloat16 output needs sm_100 or newer")
    return cudnn


def test_cudnn_fe_says_why_it_takes_no_fp8_config_below_blackwell(cudnn):
    """On Hopper cuDNN 9.19 declined every FP8 graph with a bfloat16 output (its FP8 SDPA
    writes e4m3 there): the peer's row says so before any graph is built."""
    if torch.cuda.get_device_capability() >= peers.CUDNN_FP8_MIN_CAPABILITY:
        pytest.skip("Blackwell or newer: cuDNN takes the FP8 config")
    reason = registry.get("cudnn-fe").unsupported(_config(FP8_SHAPES[0]))
    assert reason and "bfloat16 output on Blackwell (sm_100) and newer only" in reason


@pytest.mark.parametrize("shape", FP8_SHAPES, ids=[_config(s).name for s in FP8_SHAPES])
def test_cudnn_fe_fp8_meets_the_fp8_rule_against_float64_on_the_dequantized_inputs(hopper, shape):
    config = _config(shape)
    impl = registry.get("cudnn-fe")
    assert impl.unsupported(config) is None
    inputs = correctness.make_inputs(config, DEVICE, 7)
    out = impl.bhsd_output(
        impl.run(*impl.native_inputs(inputs), config.causal, **inputs.call_kwargs())
    )
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == inputs[0].shape
    ref = correctness.chunked_reference(
        lambda q, k, v, c: _math_float64(q, k, v, c), *inputs.dequantized(), config.causal
    )
    error = float((out.double() - ref).abs().max())
    tolerance = correctness.max_error_tolerance(config, inputs, ref)
    print(f"{config.name}: max error {error:.4g}, tolerance {tolerance:.4g}")
    assert error <= tolerance, f"max error {error:.3g} > {tolerance:.3g}"


@pytest.mark.parametrize("shape", [FP8_SHAPES[1], FP8_SHAPES[3]], ids=["d128c", "d256"])
def test_cudnn_fe_fp8_passes_the_whole_gate_and_sdpa_says_it_has_no_fp8_path(hopper, shape):
    """Two calls, S = 127 and 129, the CUDA-graph probe (its descales rewritten for the
    replay); SDPA's row an 'unsupported' one, not a crash."""
    config = _config(shape)
    rows = correctness.check_config("r", config, _plan(config), 0, DEVICE)
    by_name = {r.implementation: r for r in rows}
    assert by_name["cudnn-fe"].passed, by_name["cudnn-fe"].message
    sdpa = by_name["sdpa-cudnn"]
    assert not sdpa.passed and sdpa.backend == "unavailable"
    assert sdpa.message.startswith("unsupported: dtype float8_e4m3fn (torch's SDPA"), sdpa.message


def test_cudnn_fe_fp8_reads_the_descales_at_each_call(hopper):
    """One graph, the descales bound per call: doubling v's descale doubles the output."""
    config = _config(FP8_SHAPES[0])
    impl = registry.get("cudnn-fe")
    inputs = correctness.make_inputs(config, DEVICE, 1)
    native = impl.native_inputs(inputs)
    descales = inputs.call_kwargs()
    first = impl.run(*native, config.causal, **descales)
    built = peers.cudnn_graph(*native, config.causal)
    descales["v_descale"] = descales["v_descale"] * 2
    second = impl.run(*native, config.causal, **descales)
    torch.cuda.synchronize()
    assert peers.cudnn_graph(*native, config.causal) is built
    torch.testing.assert_close(second.float(), 2 * first.float(), rtol=1e-2, atol=1e-2)
