"""The correctness gate catches wrong and unwritten outputs, and records refusals as rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benches import correctness, registry
from results_schema import AttentionConfig, Plan

CPU = torch.device("cpu")


def _plan(candidate: str, dtype: str = "float32") -> Plan:
    config = AttentionConfig(
        name="c", batch=2, heads=3, seq_len=97, head_dim=64, dtype=dtype, causal=True
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate=candidate,
        compared_with=["sdpa-math"],
        reference="reference",
        samples_per_config=1,
        configs=[config],
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pytorch_passes_its_own_gate(dtype):
    plan = _plan("sdpa", dtype)
    rows = correctness.check_config("r", plan.configs[0], plan, 0, CPU)
    assert [r.implementation for r in rows] == ["sdpa", "sdpa-math"]
    assert all(r.passed and r.max_abs_error <= r.tolerance for r in rows)


def _replace_sdpa(monkeypatch, run):
    impl = dataclasses.replace(registry.IMPLEMENTATIONS["sdpa"], run=run)
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", impl)


def test_an_unwritten_row_fails_even_though_sdpa_sets_no_tolerance(monkeypatch):
    right = registry.get("sdpa").run

    # Fresh memory may happen to hold the right answer, so the unwritten row is made
    # deterministic: it stays at zero, as a kernel that skips its last query would leave it.
    def skips_last_query(q, k, v, causal):
        out = torch.zeros_like(q)
        out[..., :-1, :] = right(q, k, v, causal)[..., :-1, :]
        return out

    _replace_sdpa(monkeypatch, skips_last_query)
    plan = _plan("sdpa")
    candidate, baseline = correctness.check_config("r", plan.configs[0], plan, 0, CPU)
    assert not candidate.passed and candidate.message
    assert baseline.passed


def test_nan_never_passes_and_exceptions_become_rows(monkeypatch):
    _replace_sdpa(monkeypatch, lambda q, k, v, causal: torch.full_like(q, float("nan")))
    plan = _plan("sdpa")
    row = correctness.check_config("r", plan.configs[0], plan, 0, CPU)[0]
    assert not row.passed and row.nonfinite == q_numel(plan) and row.rel_l2_error is None

    def refuses(q, k, v, causal):
        raise RuntimeError("no kernel for this shape")

    _replace_sdpa(monkeypatch, refuses)
    row = correctness.check_config("r", plan.configs[0], plan, 0, CPU)[0]
    assert not row.passed and "no kernel for this shape" in row.message


def test_unavailable_implementation_is_a_failed_row():
    plan = _plan("sdpa-flash")  # needs CUDA
    row = correctness.check_config("r", plan.configs[0], plan, 0, CPU)[0]
    assert not row.passed and "CUDA" in row.message


@pytest.mark.slow
def test_chunked_reference_equals_the_whole(monkeypatch):
    q, k, v = correctness.make_inputs(_plan("sdpa").configs[0], CPU, seed=1)
    reference = registry.get("reference").run
    whole = reference(q, k, v, True)
    monkeypatch.setattr(correctness, "REFERENCE_CHUNK_BYTES", 1)  # one head per chunk
    torch.testing.assert_close(
        correctness.chunked_reference(reference, q, k, v, True), whole, rtol=0, atol=0
    )


def q_numel(plan: Plan) -> int:
    c = plan.configs[0]
    return c.batch * c.heads * c.seq_len * c.head_dim


def test_grouped_query_attention_passes_the_gate_with_k_and_v_never_repeated():
    config = AttentionConfig(
        name="gqa",
        batch=1,
        heads=8,
        kv_heads=2,
        seq_len=97,
        head_dim=64,
        dtype="float32",
        causal=True,
    )
    plan = _plan("sdpa").model_copy(update={"configs": [config]})
    q, k, v = correctness.make_inputs(config, CPU, 0)
    assert q.shape[1] == 8 and k.shape[1] == v.shape[1] == 2
    rows = correctness.check_config("r", config, plan, 0, CPU)
    assert [r.implementation for r in rows] == ["sdpa", "sdpa-math"]
    assert all(r.passed for r in rows), rows


def test_heads_must_be_whole_groups_of_kv_heads():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        AttentionConfig(
            name="bad",
            batch=1,
            heads=8,
            kv_heads=3,
            seq_len=16,
            head_dim=64,
            dtype="float32",
            causal=False,
        )
