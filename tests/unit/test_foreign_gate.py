"""The correctness gate against kernels it cannot trust (issue 29 item 5): each test registers
one deliberately broken implementation in place of `sdpa` and checks that its row fails with
a one-line reason while the other implementation's row (sdpa-math) still passes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benches import correctness, registry
from results_schema import AttentionConfig, CorrectnessRow, Plan

CPU = torch.device("cpu")
RIGHT = registry.IMPLEMENTATIONS["sdpa"].run


def _plan(dtype: str = "float32", seq_len: int = 97) -> Plan:
    config = AttentionConfig(
        name="c", batch=2, heads=3, seq_len=seq_len, head_dim=64, dtype=dtype, causal=True
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate="sdpa",
        compared_with=["sdpa-math"],
        reference="reference",
        samples_per_config=1,
        configs=[config],
    )


def _gate_with(monkeypatch, run, **plan_options) -> tuple[CorrectnessRow, CorrectnessRow]:
    """The gate's (broken sdpa, sdpa-math) rows with `run` registered as sdpa."""
    impl = dataclasses.replace(registry.IMPLEMENTATIONS["sdpa"], run=run)
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", impl)
    plan = _plan(**plan_options)
    broken, other = correctness.check_config("r", plan.configs[0], plan, 0, CPU)
    assert other.implementation == "sdpa-math" and other.passed, other
    assert "\n" not in broken.message
    return broken, other


# --- tolerance: twice plain attention's max error, plus eps ------------------------------


def _plain_attention_max_error(q, k, v, causal) -> float:
    reference = registry.get("reference").run
    plain = correctness.same_dtype_attention(q, k, v, causal)
    return float((plain.double() - reference(q, k, v, causal)).abs().max())


def test_one_element_off_by_three_times_plain_attentions_error_fails(monkeypatch):
    """One element off barely moves the relative L2 error: only a max-error rule sees it."""

    def one_element_off(q, k, v, causal):
        out = RIGHT(q, k, v, causal)
        # Over the wide-dtype floor too (about 1e-4 here): a real bug's size, not rounding.
        off = 3 * _plain_attention_max_error(q, k, v, causal) + 1e-3
        out[0, 0, -1, 0] += off
        return out

    broken, _ = _gate_with(monkeypatch, one_element_off)
    assert not broken.passed
    assert broken.message.startswith("max error ") and "over tolerance" in broken.message
    assert broken.max_abs_error > broken.tolerance


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_tolerance_is_twice_plain_attentions_max_error_plus_a_dtype_eps(dtype):
    plan = _plan(dtype)
    config = plan.configs[0]
    q, k, v = correctness.make_inputs(config, CPU, correctness.config_seed(0, 0, "correctness"))
    ref = correctness.reference_output(plan, config, (q, k, v))
    largest = float(ref.abs().max())
    expected = (
        2 * _plain_attention_max_error(q, k, v, True)
        + 2 * correctness.unit_roundoff(dtype) * largest
    )
    if dtype == "float32":  # the wide-dtype floor: 32 roundoffs x sqrt(keys) x max|ref|
        floor = 32 * correctness.unit_roundoff(dtype) * k.shape[-2] ** 0.5 * largest
        expected = max(expected, floor)
    rows = correctness.check_config("r", config, plan, 0, CPU)
    assert all(r.passed for r in rows), rows
    assert all(r.tolerance == pytest.approx(expected, rel=1e-9) for r in rows)


# --- NaN is no wildcard -------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_single_non_finite_element_fails(monkeypatch, value):
    def one_nan(q, k, v, causal):
        out = RIGHT(q, k, v, causal)
        out[1, 2, 5, 7] = value
        return out

    broken, _ = _gate_with(monkeypatch, one_nan)
    assert not broken.passed and broken.nonfinite == 1
    assert broken.message == "1 non-finite output elements where the reference is finite"


# --- inputs unchanged, output owns its memory ---------------------------------------------


def test_a_kernel_that_writes_into_its_input_fails(monkeypatch):
    def scribbles_on_k(q, k, v, causal):
        out = RIGHT(q, k, v, causal)
        k.mul_(2)  # after the answer: the output is right, the caller's k is not
        return out

    broken, _ = _gate_with(monkeypatch, scribbles_on_k)
    assert not broken.passed and broken.message == "modified its input k"


def test_an_output_that_is_its_input_fails(monkeypatch):
    def answers_in_q(q, k, v, causal):
        q.copy_(RIGHT(q, k, v, causal))
        return q

    broken, _ = _gate_with(monkeypatch, answers_in_q)
    assert not broken.passed and broken.message == "returned a view of its input q"


def test_an_output_returned_again_from_a_cache_fails(monkeypatch):
    cache: dict[str, torch.Tensor] = {}

    def reuses_its_buffer(q, k, v, causal):
        out = cache.setdefault("out", torch.empty_like(q))
        out.copy_(RIGHT(q, k, v, causal))
        return out

    broken, _ = _gate_with(monkeypatch, reuses_its_buffer)
    assert not broken.passed
    assert broken.message == "returned the same buffer as its previous call"


# --- awkward lengths ------------------------------------------------------------------------


def test_a_kernel_right_only_on_whole_blocks_fails_at_an_awkward_length(monkeypatch):
    """Checked at S=128 only it would pass: it drops the queries past the last block of 64."""

    def whole_blocks_only(q, k, v, causal):
        out = RIGHT(q, k, v, causal)
        out[..., q.shape[-2] // 64 * 64 :, :] = 0
        return out

    broken, _ = _gate_with(monkeypatch, whole_blocks_only, seq_len=128)
    assert not broken.passed
    assert broken.message.startswith("at S=127: max error ")


# --- what comes back must be a tensor of q's shape, dtype and device ----------------------


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda out: None, "returned NoneType, not a tensor"),
        (lambda out: out[..., :-1, :], "output shape (2, 3, 96, 64), expected (2, 3, 97, 64)"),
        (lambda out: out.double(), "output dtype torch.float64, expected torch.float32"),
        (lambda out: out.to("meta"), "output on meta, expected cpu"),
    ],
    ids=["none", "shape", "dtype", "device"],
)
def test_a_wrong_output_fails_with_what_is_wrong(monkeypatch, wrong, message):
    broken, _ = _gate_with(monkeypatch, lambda q, k, v, causal: wrong(RIGHT(q, k, v, causal)))
    assert not broken.passed and broken.message == message


def test_a_kernel_that_raises_fails_with_the_first_line_of_its_error(monkeypatch):
    def raises(q, k, v, causal):
        raise RuntimeError("CUDA error: an illegal memory access\nmore detail")

    broken, _ = _gate_with(monkeypatch, raises)
    assert not broken.passed and broken.backend == "error"
    assert broken.message == "RuntimeError: CUDA error: an illegal memory access"
