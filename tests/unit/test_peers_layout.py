"""The layout hook of a registry implementation (issue 29 item 7): an implementation whose
kernel takes another layout (BSHD here, as flash-attn's) gets its inputs made in that layout
once, before timing, and its output mapped back to [batch, heads, seq, head_dim] for every
check. Nothing converts inside a timed call."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benches import correctness, placement, registry, timing
from results_schema import AttentionConfig, Plan
from tests.unit.test_foreign_gate import _plan as foreign_gate_plan

CPU = torch.device("cpu")
CONFIG = AttentionConfig(
    name="c", batch=2, heads=4, seq_len=33, head_dim=16, dtype="float32", causal=True
)


def _bshd(inputs: tuple) -> tuple:
    return tuple(t.transpose(1, 2).contiguous() for t in inputs)


def _bhsd(out: torch.Tensor) -> torch.Tensor:
    return out.transpose(1, 2)


class Recorder:
    """A BSHD attention that records every layout it was handed and every conversion."""

    def __init__(self, mutate: bool = False) -> None:
        self.seen: list[tuple] = []
        self.conversions = 0
        self.mutate = mutate

    def run(self, q, k, v, causal):
        self.seen.append((tuple(q.shape), q.is_contiguous()))
        if self.mutate:
            q.add_(1.0)
        out = F.scaled_dot_product_attention(*_bhsd_all((q, k, v)), is_causal=causal)
        return out.transpose(1, 2).contiguous()  # BSHD, like flash_attn_func

    def to_native(self, inputs: tuple) -> tuple:
        self.conversions += 1
        return _bshd(inputs)

    def implementation(self, name: str = "sdpa") -> registry.Implementation:
        return dataclasses.replace(
            registry.IMPLEMENTATIONS["sdpa"],
            name=name,
            run=self.run,
            backend_for=lambda *a: "bshd-recorder",
            to_native=self.to_native,
            from_native=_bhsd,
        )


def _bhsd_all(inputs: tuple) -> tuple:
    return tuple(t.transpose(1, 2) for t in inputs)


def _inputs(seed: int = 0) -> tuple:
    return correctness.make_inputs(CONFIG, CPU, seed)


def test_placement_hands_run_native_copies_and_converts_nothing_while_timing():
    recorder = Recorder()
    inputs = _inputs()
    rng = np.random.default_rng(0)
    built = {
        "p": placement.Placement(
            timing.CpuClock(), recorder.implementation(), inputs, True, "single", 1, rng
        )
    }
    converted_before_timing = recorder.conversions
    for _ in range(5):
        built["p"].sample()
    assert recorder.conversions == converted_before_timing == 1
    b, h, s, d = inputs[0].shape
    assert set(recorder.seen) == {((b, s, h, d), True)}
    expected = F.scaled_dot_product_attention(*inputs, is_causal=True)
    out = built["p"].last_output()
    assert out.shape == expected.shape and torch.allclose(out, expected, atol=1e-5)


def test_refill_writes_the_new_values_in_the_native_layout():
    recorder = Recorder()
    rng = np.random.default_rng(0)
    built = {
        "p": placement.Placement(
            timing.CpuClock(), recorder.implementation(), _inputs(), True, "single", 1, rng
        )
    }
    fresh = _inputs(seed=1)
    built["p"].refill(fresh)
    for _ in range(len(timing.input_copies(fresh))):  # one call on every input copy
        built["p"].sample()
    expected = F.scaled_dot_product_attention(*fresh, is_causal=True)
    assert torch.allclose(built["p"].last_output(), expected, atol=1e-5)


def test_a_bare_callable_is_placed_as_before():
    inputs = _inputs()
    calls = []

    def bhsd(q, k, v, causal):
        calls.append(tuple(q.shape))
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    rng = np.random.default_rng(0)
    built = {"p": placement.Placement(timing.CpuClock(), bhsd, inputs, True, "single", 1, rng)}
    built["p"].sample()
    assert calls == [tuple(inputs[0].shape)]
    expected = F.scaled_dot_product_attention(*inputs, is_causal=True)
    assert torch.equal(built["p"].last_output(), expected)


def _plan() -> Plan:
    return foreign_gate_plan().model_copy(update={"configs": [CONFIG]})


def test_the_gate_calls_a_layout_implementation_with_native_inputs_and_checks_bhsd(monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", recorder.implementation())
    plan = _plan()
    row, other = correctness.check_config("r", CONFIG, plan, 0, CPU)
    assert row.passed and other.passed, (row, other)
    assert row.backend == "bshd-recorder"
    b, h, _, d = CONFIG.batch, CONFIG.heads, CONFIG.seq_len, CONFIG.head_dim
    lengths = {shape[1] for shape, _ in recorder.seen}
    assert {(shape[0], shape[2], shape[3]) for shape, _ in recorder.seen} == {(b, h, d)}
    assert lengths == {CONFIG.seq_len, *correctness.AWKWARD_SEQ_LENS}


def test_the_gate_sees_a_write_into_a_native_input(monkeypatch):
    recorder = Recorder(mutate=True)
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", recorder.implementation())
    row, other = correctness.check_config("r", CONFIG, _plan(), 0, CPU)
    assert other.passed and not row.passed
    assert row.message == "modified its input q"


def test_an_output_left_in_the_native_layout_fails_on_its_shape(monkeypatch):
    """Without from_native the BSHD output is checked as it is: a wrong shape, not a pass."""
    recorder = Recorder()
    impl = dataclasses.replace(recorder.implementation(), from_native=None)
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", impl)
    row, _ = correctness.check_config("r", CONFIG, _plan(), 0, CPU)
    assert not row.passed and row.message.startswith("output shape (2, 33, 4, 16)")


def test_hooks_default_to_none():
    impl = registry.IMPLEMENTATIONS["sdpa"]
    assert impl.to_native is None and impl.from_native is None


@pytest.mark.slow
def test_the_harness_times_a_layout_implementation_on_native_inputs(monkeypatch, tmp_path):
    """The gate, then the timed loop, in process: every call the layout implementation gets
    is in its layout, and its timed outputs pass the timed checks."""
    from benches import runner
    from benches.environment import fingerprint
    from benches.writers import StatusWriter, read_csv
    from results_schema import CorrectnessRow

    recorder = Recorder()
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "sdpa", recorder.implementation())
    plan = _plan().model_copy(update={"samples_per_config": 4, "placements": 2})
    stop = runner.StopRequested()
    ctx = runner.RunContext(plan, tmp_path, "r", StatusWriter(None, "r"), stop)
    gate = runner.run_correctness(ctx)
    assert all(r.passed for r in gate), gate
    calls_in_gate = len(recorder.seen)
    runner.run_benchmark(ctx, gate, None, fingerprint())
    assert len(recorder.seen) > calls_in_gate
    b, h, s, d = CONFIG.batch, CONFIG.heads, CONFIG.seq_len, CONFIG.head_dim
    assert set(recorder.seen[calls_in_gate:]) == {((b, s, h, d), True)}
    checks = read_csv(tmp_path / "results" / "timed_checks.csv", CorrectnessRow)
    assert {r.implementation for r in checks} == {"sdpa", "sdpa-math"}
    assert all(r.passed for r in checks), checks
