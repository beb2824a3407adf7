"""Statistics on synthetic samples with known answers."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from benches.stats import describe, paired_speedup, summarize
from results_schema import AttentionConfig, Measurement, Plan


def test_describe_matches_numpy():
    x = np.random.default_rng(1).lognormal(0, 0.1, 501)
    d = describe(x)
    assert d.n == 501
    assert d.median == pytest.approx(np.median(x))
    assert d.p10 == pytest.approx(np.percentile(x, 10))
    q75, q25 = np.percentile(x, [75, 25])
    assert d.iqr_over_median == pytest.approx((q75 - q25) / np.median(x))


def test_known_ratio_lies_inside_the_interval():
    rng = np.random.default_rng(2)
    drift = 1 + 0.2 * np.sin(np.arange(200) / 10)  # shared by both within a round
    candidate = 1.0 * drift * rng.lognormal(0, 0.03, 200)
    baseline = 1.5 * drift * rng.lognormal(0, 0.03, 200)
    s = paired_speedup(dict(enumerate(baseline)), dict(enumerate(candidate)))
    assert s.ci_low < 1.5 < s.ci_high
    assert s.ci_high - s.ci_low < 0.05  # pairing cancels the drift
    assert s.verdict == "faster" and s.pairs == 200
    slower = paired_speedup(dict(enumerate(candidate)), dict(enumerate(baseline)))
    assert slower.verdict == "slower"


def test_identical_implementations_are_indistinguishable():
    rng = np.random.default_rng(3)
    a = dict(enumerate(rng.lognormal(0, 0.05, 100)))
    b = dict(enumerate(rng.lognormal(0, 0.05, 100)))
    s = paired_speedup(a, b)
    assert s.ci_low < 1.0 < s.ci_high
    assert s.verdict == "indistinguishable"


def test_only_rounds_present_on_both_sides_pair():
    s = paired_speedup({0: 2.0, 1: 2.0, 7: 9.0}, {0: 1.0, 1: 1.0})
    assert s.pairs == 2 and s.ratio == 2.0
    assert paired_speedup({0: 1.0}, {1: 1.0}) is None


def _plan() -> Plan:
    config = AttentionConfig(
        name="c", batch=1, heads=2, seq_len=128, head_dim=64, dtype="float16", causal=False
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate="a",
        baselines=["b"],
        reference="reference",
        samples_per_config=3,
        configs=[config],
    )


def test_summarize_fills_speedup_on_baseline_rows_only():
    now = datetime.now(timezone.utc)
    rows = [
        Measurement(
            run_id="r",
            config="c",
            implementation=impl,
            mode="single",
            round=r,
            calls=1,
            latency_ms=ms * (1 + r / 100),
            timestamp=now,
        )
        for r in range(3)
        for impl, ms in (("a", 1.0), ("b", 2.0))
    ]
    summary = summarize("r", _plan(), rows, {("c", "a"): "x", ("c", "b"): "y"}, peak_tflops=100.0)
    a, b = summary
    assert (a.implementation, a.backend, a.speedup) == ("a", "x", None)
    assert b.speedup == pytest.approx(2.0) and b.verdict == "faster"
    flops = 4 * 1 * 2 * 128 * 128 * 64
    assert a.tflops == pytest.approx(flops / (a.median_ms * 1e-3) / 1e12)
    assert a.pct_of_peak == pytest.approx(a.tflops)  # peak 100 TFLOP/s
