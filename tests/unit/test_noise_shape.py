"""Quantised and bimodal timings, on synthetic samples shaped like those a loaded CPU and a
GPU's timer give: flagged on their row, and kept from firm verdicts."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from benches.stats import summarize
from benches.timing_shape import MIN_SHAPE_SAMPLES, shape_flag
from results_schema import AttentionConfig, Measurement, Plan

QUANTUM_MS = 3.93  # a loaded 2-core machine's scheduler quantum, as its latencies showed


def test_clean_lognormal_noise_is_never_flagged():
    rng = np.random.default_rng(31)
    clean = [
        rng.lognormal(np.log(0.05), sigma, n)
        for sigma in (0.002, 0.01, 0.03, 0.1, 0.3)  # a quiet GPU to a very noisy CPU
        for n in (20, 50)
        for _ in range(20)
    ]
    flagged = [shape_flag(samples) for samples in clean]
    assert len(flagged) == 200 and set(flagged) == {None}  # the rule's rate: ~0.05% at 20


def test_a_timers_resolution_is_quantised():
    # An 8 µs kernel timed by a clock of 0.5 µs ticks: every sample is 7.5, 8 or 8.5 µs.
    rng = np.random.default_rng(32)
    ticks = np.round(rng.lognormal(np.log(8.0), 0.03, 50) / 0.5) * 0.5 / 1000
    assert shape_flag(ticks) == "quantised"
    assert shape_flag(np.full(20, 0.0075)) == "quantised"
    # The same clock on a 0.9 ms kernel: ticks of 0.06% cannot move a verdict at δ = 1%.
    fine = np.round(rng.lognormal(np.log(900.0), 0.0005, 50) / 0.5) * 0.5 / 1000
    assert len(set(fine)) <= 5 and shape_flag(fine) is None


def test_calls_that_wait_whole_scheduler_quanta_are_bimodal():
    # Measured on a loaded 2-core CPU: 15 µs calls, 8 of 20 of which waited 2 or 3 quanta.
    rng = np.random.default_rng(33)
    clean = rng.lognormal(np.log(0.015), 0.1, 12)
    waited = QUANTUM_MS * rng.choice([2, 3], 8) * rng.lognormal(0, 0.01, 8)
    assert shape_flag(np.concatenate([clean, waited])) == "bimodal"
    # Every call waited, on 7 or 8 quanta: two groups again (28 ms and 32 ms).
    whole = QUANTUM_MS * rng.choice([7, 8], 20, p=[0.4, 0.6]) * rng.lognormal(0, 0.003, 20)
    assert shape_flag(whole) == "bimodal"


def test_a_clock_step_is_bimodal():
    # A GPU that dropped a clock bin for 30% of the samples: 15% slower, each group tight.
    rng = np.random.default_rng(34)
    samples = np.concatenate([rng.lognormal(0, 0.01, 35), rng.lognormal(np.log(1.15), 0.01, 15)])
    assert shape_flag(samples) == "bimodal"


def test_a_few_outliers_or_too_few_samples_are_not_flagged():
    rng = np.random.default_rng(35)
    mostly_clean = np.concatenate([rng.lognormal(np.log(0.015), 0.1, 17), [2.5, 7.8, 11.8]])
    assert shape_flag(mostly_clean) is None  # the median stays among the clean 85%
    few = np.concatenate([rng.lognormal(0, 0.01, 10), rng.lognormal(2, 0.01, 9)])
    assert len(few) < MIN_SHAPE_SAMPLES and shape_flag(few) is None


def _plan(**extra) -> Plan:
    config = AttentionConfig(
        name="c", batch=1, heads=2, seq_len=17, head_dim=64, dtype="float32", causal=False
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate="a",
        compared_with=["b"],
        reference="reference",
        samples_per_config=20,
        placements=4,
        configs=[config],
        **extra,
    )


def _measurements(latencies: dict[str, np.ndarray]) -> list[Measurement]:
    now = datetime.now(timezone.utc)
    return [
        Measurement(
            run_id="r",
            config="c",
            implementation=name,
            mode="single",
            round=r,
            placement=r // 5,
            calls=1,
            latency_ms=float(values[r]),
            timestamp=now,
        )
        for name, values in latencies.items()
        for r in range(20)
    ]


@pytest.mark.parametrize("flagged", ["a", "b"])
def test_a_bimodal_row_is_flagged_and_no_comparison_with_it_gets_a_verdict(flagged):
    rng = np.random.default_rng(36)
    clean = {
        "a": rng.lognormal(np.log(0.015), 0.05, 20),
        "b": rng.lognormal(np.log(0.06), 0.05, 20),
    }
    waited = rng.permutation(np.r_[np.ones(12), np.full(8, QUANTUM_MS * 2 / 0.015)])
    latencies = {**clean, flagged: clean[flagged] * waited}
    rows = {
        r.implementation: r for r in summarize("r", _plan(), _measurements(latencies), {}, None)
    }
    assert rows[flagged].flag == "bimodal"
    assert rows["b"].speedup is not None and rows["b"].verdict is None
    unflagged = summarize("r", _plan(), _measurements(clean), {}, None)
    assert [(r.flag, r.verdict) for r in unflagged] == [(None, None), (None, "faster")]
