"""FP8 (e4m3) configs on the CPU with real torch: the harness's inputs (quantized per tensor,
a descale each), the float64 reference on the dequantized values, and the gate's FP8 rule
(twice plain FP8 attention's error on the same quantized inputs, plus one bfloat16 ulp;
benches/fp8.py, docs/kernel-contract.md "FP8"). An honest emulated FP8 kernel passes; one
that drops a descale, or rounds P to e4m3 without scaling it into e4m3's range, fails."""

from __future__ import annotations

import math

import pytest
import torch

from benches import correctness, fp8, registry
from benches.implementation import Implementation
from benches.reference import expand_kv_heads, reference_attention
from results_schema import AttentionConfig, Plan
from results_schema.kernel_contract import KernelSupports

CPU = torch.device("cpu")
FP8 = "float8_e4m3fn"


def _config(seq_len=256, head_dim=64, causal=True, kv_heads=None) -> AttentionConfig:
    return AttentionConfig(
        name="fp8",
        batch=1,
        heads=4,
        kv_heads=kv_heads,
        seq_len=seq_len,
        head_dim=head_dim,
        dtype=FP8,
        causal=causal,
    )


def _plan(candidate: str, config: AttentionConfig, compared_with=("reference",)) -> Plan:
    return Plan(
        name="fp8",
        description="",
        device="cpu",
        candidate=candidate,
        compared_with=list(compared_with),
        reference="reference",
        samples_per_config=1,
        configs=[config],
    )


def tiled_fp8(q, k, v, causal, *, q_descale, k_descale, v_descale, p_scale=fp8.P_SCALE):
    """A FlashAttention-style FP8 forward, emulated: key blocks of 64 with an online softmax,
    P relative to the running max scaled by `p_scale` and rounded to e4m3, P V summed in
    float32, the output normalized, descaled and rounded to bfloat16."""
    k, v = expand_kv_heads(q, k), expand_kv_heads(q, v)
    s_q, s_k = q.shape[-2], k.shape[-2]
    scale = (q_descale * k_descale).float() / math.sqrt(q.shape[-1])
    row_max = torch.full((*q.shape[:-1], 1), float("-inf"))
    row_sum = torch.zeros_like(row_max)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    query = torch.arange(s_q)[:, None] + (s_k - s_q)
    for start in range(0, s_k, 64):
        scores = torch.matmul(q.float(), k[..., start : start + 64, :].float().mT) * scale
        if causal:
            key = torch.arange(start, min(start + 64, s_k))[None, :]
            scores = scores.masked_fill(key > query, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
        keep = torch.exp(row_max - new_max).nan_to_num(0.0)
        p = torch.exp(scores - new_max).nan_to_num(0.0)
        row_sum = row_sum * keep + p.sum(-1, keepdim=True)
        p_fp8 = (p * p_scale).to(fp8.E4M3).float()
        acc = acc * keep + torch.matmul(p_fp8, v[..., start : start + 64, :].float())
        row_max = new_max
    return (acc * (v_descale.float() / p_scale) / row_sum).to(torch.bfloat16)


def without_p_scaling(q, k, v, causal, **descales):
    """P rounded to e4m3 as it is, in [0, 1]: most small probabilities become subnormal."""
    return tiled_fp8(q, k, v, causal, **descales, p_scale=1.0)


def without_q_descale(q, k, v, causal, *, q_descale, k_descale, v_descale):
    """The scores' q descale forgotten: scores ~100x too large, the softmax an argmax."""
    ones = torch.ones_like(q_descale)
    return tiled_fp8(q, k, v, causal, q_descale=ones, k_descale=k_descale, v_descale=v_descale)


def _register(monkeypatch, name, run) -> None:
    impl = Implementation(
        name, run, lambda *a: f"{name}:emulated", lambda device: None, dtypes=(FP8,)
    )
    monkeypatch.setitem(registry.IMPLEMENTATIONS, name, impl)


# --- the inputs and their reference ---------------------------------------------------------


def test_fp8_inputs_are_the_same_draw_quantized_per_tensor_with_a_descale_each():
    config = _config(kv_heads=2)
    inputs = correctness.make_inputs(config, CPU, 11)
    assert isinstance(inputs, fp8.QuantizedInputs)
    assert [t.dtype for t in inputs] == [torch.float8_e4m3fn] * 3
    assert [tuple(t.shape) for t in inputs] == [(1, 4, 256, 64), (1, 2, 256, 64), (1, 2, 256, 64)]
    drawn = correctness.make_inputs(config.model_copy(update={"dtype": "float32"}), CPU, 11)
    for x8, descale, x in zip(inputs, inputs.descales, drawn, strict=True):
        assert descale.dtype == torch.float32 and descale.shape == (1,)
        assert float(descale) == pytest.approx(float(x.abs().max()) / 448.0, rel=1e-6)
        assert float(x8.float().abs().max()) == 448.0  # amax lands on e4m3's largest value
        # e4m3 keeps 3 mantissa bits: a relative error of at most 2^-4, below 2^-6 absolute
        back = fp8.dequantize(x8, descale)
        bound = 2.0**-4 * x.double().abs() + 2.0**-9 * float(descale)
        assert bool(((back - x.double()).abs() <= bound).all())


def test_the_reference_is_float64_attention_on_the_dequantized_inputs():
    config = _config(seq_len=64)
    inputs = correctness.make_inputs(config, CPU, 3)
    ref = correctness.reference_output(_plan("sdpa", config), config, inputs)
    assert ref.dtype == torch.float64
    expected = reference_attention(*inputs.dequantized(), True)
    assert torch.equal(ref, expected)


# --- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_an_honest_fp8_kernel_passes_the_gate_at_every_length(monkeypatch, causal, head_dim):
    _register(monkeypatch, "fp8-tiled", tiled_fp8)
    config = _config(head_dim=head_dim, causal=causal, kv_heads=2)
    row, reference = correctness.check_config("r", config, _plan("fp8-tiled", config), 0, CPU)
    assert row.passed, row.message
    assert reference.passed, reference.message
    assert 0 < row.max_abs_error <= row.tolerance


def test_the_fp8_tolerance_is_twice_plain_fp8_attentions_error_plus_one_bfloat16_ulp():
    config = _config(seq_len=128)
    inputs = correctness.make_inputs(config, CPU, 5)
    ref = reference_attention(*inputs.dequantized(), True)
    descales = dict(zip(fp8.DESCALE_NAMES, inputs.descales, strict=True))
    plain = fp8.plain_fp8_attention(*inputs, True, **descales)
    assert plain.dtype == torch.bfloat16
    plain_error = float((plain.double() - ref).abs().max())
    ulp = 2 * 2.0**-8 * float(ref.abs().max())  # 2 unit roundoffs of bfloat16
    tolerance = correctness.max_error_tolerance(config, inputs, ref)
    assert tolerance == pytest.approx(2 * plain_error + ulp, rel=1e-12)
    # FP8's error is the quantized P's: well over bfloat16 attention's on the same values
    bf16 = correctness.same_dtype_attention(*(t.bfloat16() for t in inputs.dequantized()), True)
    assert plain_error > 2 * float((bf16.double() - ref).abs().max())


def test_a_kernel_that_forgets_a_descale_fails_the_gate(monkeypatch):
    _register(monkeypatch, "fp8-no-q-descale", without_q_descale)
    config = _config()
    row, _ = correctness.check_config("r", config, _plan("fp8-no-q-descale", config), 0, CPU)
    assert not row.passed
    assert "over tolerance" in row.message and row.max_abs_error > 10 * row.tolerance


def _many_small_probabilities(seq_len=1024, head_dim=64) -> fp8.QuantizedInputs:
    """Every query's row: one key scored about 7 above all others (e^-7 < 2^-10: in e4m3
    unscaled, the others' probabilities round to 0 or 2^-9), v of mean 1."""
    generator = torch.Generator().manual_seed(0)
    shape = (1, 2, seq_len, head_dim)
    q = torch.zeros(shape)
    q[..., 0] = math.sqrt(head_dim)  # scores: k's first coordinate
    k = torch.rand(shape, generator=generator) * 2 - 1
    k[..., 0] = torch.rand(shape[:3], generator=generator) - 0.5
    k[..., 0, 0] = 7.0
    v = 1 + 0.1 * torch.randn(shape, generator=generator)
    return fp8.quantized_inputs((q, k, v))


def test_a_kernel_that_rounds_p_to_e4m3_unscaled_fails_where_probabilities_are_small():
    inputs = _many_small_probabilities()
    config = _config(seq_len=1024, causal=False).model_copy(update={"kv_heads": 2, "heads": 2})
    ref = reference_attention(*inputs.dequantized(), False)
    tolerance = correctness.max_error_tolerance(config, inputs, ref)
    descales = inputs.call_kwargs()
    honest = float((tiled_fp8(*inputs, False, **descales).double() - ref).abs().max())
    unscaled = float((without_p_scaling(*inputs, False, **descales).double() - ref).abs().max())
    assert honest < 0.5 * tolerance, (honest, tolerance)
    assert unscaled > 2 * tolerance, (honest, tolerance, unscaled)


def test_sdpa_says_it_has_no_fp8_path_and_the_reference_row_passes():
    config = _config(seq_len=64)
    rows = correctness.check_config(
        "r", config, _plan("sdpa", config, ("sdpa-math", "reference")), 0, CPU
    )
    by_name = {r.implementation: r for r in rows}
    for name in ("sdpa", "sdpa-math"):
        row = by_name[name]
        assert not row.passed and row.backend == "unavailable"
        assert row.message.startswith("unsupported: dtype float8_e4m3fn (torch's SDPA"), row.message
    assert by_name["reference"].passed, by_name["reference"].message


# --- plans and the contract take the dtype ---------------------------------------------------


def test_a_kernel_contract_may_declare_fp8_and_refuses_what_it_does_not_declare():
    supports = KernelSupports(dtypes=[FP8], head_dims=[128, 256], gqa=True)
    assert supports.refuses(_config(head_dim=128, kv_heads=2)) is None
    bf16 = _config(head_dim=128).model_copy(update={"dtype": "bfloat16"})
    assert supports.refuses(bf16) == "unsupported: dtype bfloat16 (it supports float8_e4m3fn)"
    assert "dtype float8_e4m3fn" in KernelSupports().refuses(_config(head_dim=128))


def test_a_plan_with_an_fp8_config_validates():
    plan = Plan.model_validate_json(_plan("sdpa", _config()).model_dump_json())
    assert plan.configs[0].dtype == FP8


# --- the timed loop hands the descales on -----------------------------------------------------


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_a_timed_fp8_placement_calls_with_the_descales_and_refills_them(mode):
    """What the benchmark times (benches/placement.py): each call gets its inputs' descales;
    the last round's fresh inputs bring descales of their own, and the output checked then
    is attention on those (a placement that kept the first descales would fail the check)."""
    import numpy as np

    from benches import placement, timing

    config = _config(seq_len=64, kv_heads=2)
    first = correctness.make_inputs(config, CPU, 1)
    held = placement.Placement(
        timing.CpuClock(), tiled_fp8, first, True, mode, 2, np.random.default_rng(0)
    )
    held.sample()
    ref = reference_attention(*first.dequantized(), True)
    tolerance = correctness.max_error_tolerance(config, first, ref)
    assert float((held.last_output().double() - ref).abs().max()) <= tolerance
    drawn = correctness.make_inputs(config.model_copy(update={"dtype": "float32"}), CPU, 2)
    fresh = fp8.quantized_inputs(tuple(3 * t for t in drawn))  # other descales
    assert float(fresh.descales[0]) > 2 * float(first.descales[0])
    held.refill(fresh)
    held.sample()
    ref = reference_attention(*fresh.dequantized(), True)
    tolerance = correctness.max_error_tolerance(config, fresh, ref)
    assert float((held.last_output().double() - ref).abs().max()) <= tolerance


FP8_KERNEL = """\
import math

import torch


def attention(q, k, v, *, causal, scale, q_descale, k_descale, v_descale):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = q.float() @ k.float().mT * (q_descale * k_descale * scale)
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    p = (exps * 256).to(torch.float8_e4m3fn).float()
    out = p @ v.float() * (v_descale / 256) / exps.sum(dim=-1, keepdim=True)
    return out.to(torch.bfloat16)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_kernel_in_its_worker_process_is_gated_and_timed_on_fp8_inputs(tmp_path):
    """A user's FP8 kernel in its worker process (benches/isolation.py): the gate lends it
    the quantized inputs with their descales; each timed sample's fresh queries are
    quantized with q's descale in both processes, and the harness checks the rows it reads
    against float64 on their dequantized values. SDPA's rows say it has no FP8 path."""
    from benches import runner
    from benches.user_kernel import register
    from benches.writers import StatusWriter, read_csv
    from results_schema import CorrectnessRow, SummaryRow
    from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel

    tree = tmp_path / "eight"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "ops.py").write_text(FP8_KERNEL)
    kernel = UserKernel(
        identity="mine",
        directory="eight",
        contract=KernelContract(
            name="mine",
            entry="pkg.ops:attention",
            supports={"devices": ["cpu"], "dtypes": [FP8], "gqa": True},
        ),
        source=KernelIdentity(tree_sha256="0" * 64),
    )
    plan = Plan(
        name="fp8-worker",
        description="",
        device="cpu",
        candidate="mine",
        compared_with=["sdpa"],
        reference="reference",
        samples_per_config=6,
        warmup_min=2,
        warmup_max=4,
        flush_l2=False,
        configs=[_config(seq_len=96, head_dim=32, kv_heads=2)],
        user_kernels=[kernel],
    )
    register(plan, tmp_path)
    try:
        run_dir = tmp_path / "run"
        with runner.StopRequested() as stop:
            ctx = runner.RunContext(
                plan, run_dir, "r", StatusWriter(run_dir / "status.json", "r"), stop
            )
            gate = runner.run_correctness(ctx)
            environment = runner.load_or_write_environment(run_dir)
            runner.run_benchmark(ctx, gate, None, environment)
    finally:
        impl = registry.IMPLEMENTATIONS.pop("mine")
        impl.worker.close()
    rows = {r.implementation: r for r in gate}
    assert rows["mine"].passed, rows["mine"].message
    assert rows["sdpa"].message.startswith("unsupported: dtype float8_e4m3fn (torch's SDPA")
    timed = read_csv(run_dir / "results" / "timed_checks.csv", CorrectnessRow)
    mine = [r for r in timed if r.implementation == "mine"]
    assert mine and all(r.passed for r in mine), [r.message for r in mine]
    assert all(r.max_abs_error is not None and r.max_abs_error > 0 for r in mine)
    summary = read_csv(run_dir / "results" / "summary.csv", SummaryRow)
    assert [s.n for s in summary if s.implementation == "mine"] == [plan.samples_per_config]
