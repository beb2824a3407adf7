"""Statistics on synthetic samples with known answers."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from benches.stats import (
    cluster_bootstrap_median_ci,
    describe,
    geomean_speedup,
    overall_speedups,
    paired_speedup,
    small_cluster_factor,
    summarize,
    verdict,
    widened,
)
from results_schema import AttentionConfig, Measurement, Plan
from results_schema.verdicts import DIFFERENT


def test_describe_matches_numpy():
    x = np.random.default_rng(1).lognormal(0, 0.1, 501)
    d = describe(x)
    assert d.n == 501
    assert d.median == pytest.approx(np.median(x))
    assert d.p10 == pytest.approx(np.percentile(x, 10))
    q75, q25 = np.percentile(x, [75, 25])
    assert d.iqr_over_median == pytest.approx((q75 - q25) / np.median(x))


def _pairs(values) -> dict:
    """Samples of one placement, keyed (placement, round) as the harness keys them."""
    return {(0, r): v for r, v in enumerate(values)}


def test_known_ratio_lies_inside_the_interval():
    rng = np.random.default_rng(2)
    drift = 1 + 0.2 * np.sin(np.arange(200) / 10)  # shared by both within a round
    candidate = 1.0 * drift * rng.lognormal(0, 0.03, 200)
    baseline = 1.5 * drift * rng.lognormal(0, 0.03, 200)
    s = paired_speedup(_pairs(baseline), _pairs(candidate))
    assert s.ci_low < 1.5 < s.ci_high
    assert s.ci_high - s.ci_low < 0.05  # pairing cancels the drift
    assert s.verdict(0.01) == "faster" and s.pairs == 200 and s.placements == 1
    slower = paired_speedup(_pairs(candidate), _pairs(baseline))
    assert slower.verdict(0.01) == "slower"


def test_identical_implementations_are_not_different():
    rng = np.random.default_rng(3)
    a = _pairs(rng.lognormal(0, 0.05, 100))
    b = _pairs(rng.lognormal(0, 0.05, 100))
    s = paired_speedup(a, b)
    assert s.ci_low < 1.0 < s.ci_high
    assert s.verdict(0.0) == "undecided"


def test_only_rounds_present_on_both_sides_pair():
    s = paired_speedup({(0, 0): 2.0, (0, 1): 2.0, (0, 7): 9.0}, {(0, 0): 1.0, (0, 1): 1.0})
    assert s.pairs == 2 and s.ratio == 2.0
    assert paired_speedup({(0, 0): 1.0}, {(0, 1): 1.0}) is None


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1.02, 1.05, "faster"),
        (0.95, 0.98, "slower"),
        (0.995, 1.008, "equivalent"),
        (1.005, 1.02, "not-slower"),  # above 1, but not clear of the margin: not slower
        (0.99, 1.05, "not-slower"),  # its low end on 1 - margin: shown not slower
        (0.97, 1.03, "undecided"),  # across 1 - margin: neither slower nor not slower
        (0.97, 0.995, "undecided"),  # most of it below 1, but not all below 1 - margin
    ],
)
def test_verdicts_read_the_interval_against_the_margin(low, high, expected):
    assert verdict(low, high, margin=0.01) == expected


def _aa_experiment(rng, placements, rounds, between, within):
    """Two identical implementations: each placement moves each of them by its own
    lognormal(between) factor, each sample by lognormal(within)."""
    keys = [(p, r) for p in range(placements) for r in range(rounds)]
    shift_a = rng.lognormal(0, between, placements)
    shift_b = rng.lognormal(0, between, placements)
    a = {k: shift_a[k[0]] * rng.lognormal(0, within) for k in keys}
    b = {k: shift_b[k[0]] * rng.lognormal(0, within) for k in keys}
    return a, b


def _false_positive_rate(placements, rounds, experiments=300):
    rng = np.random.default_rng(11)
    wrong = 0
    for seed in range(experiments):
        a, b = _aa_experiment(rng, placements, rounds, between=0.01, within=0.01)
        s = paired_speedup(a, b, resamples=1000, seed=seed)
        wrong += s.verdict(0.0) in ("faster", "slower")
    return wrong / experiments


@pytest.mark.slow
def test_aa_with_placement_variance_gives_about_five_percent_false_positives():
    # The harness's default: 10 placements of 5 rounds. Resampling rounds alone would call
    # most of these different: placement shifts (1%) dwarf the sample noise of a median.
    assert 0.01 <= _false_positive_rate(placements=10, rounds=5) <= 0.09


@pytest.mark.slow
def test_resampling_rounds_alone_misses_placement_variance():
    rng = np.random.default_rng(12)
    wrong = 0
    for seed in range(200):
        a, b = _aa_experiment(rng, 10, 5, between=0.01, within=0.01)
        pooled = lambda d: {(0, i): v for i, v in enumerate(d.values())}  # noqa: E731
        wrong += paired_speedup(pooled(a), pooled(b), 1000, seed).verdict(0.0) in DIFFERENT
    assert wrong / 200 > 0.15


def test_a_known_effect_is_detected():
    rng = np.random.default_rng(13)
    found = 0
    for seed in range(100):
        a, b = _aa_experiment(rng, 10, 5, between=0.005, within=0.01)
        slowed = {k: v * 1.03 for k, v in a.items()}  # the baseline 3% slower
        s = paired_speedup(slowed, b, resamples=1000, seed=seed)
        found += s.verdict(0.01) == "faster"
        assert s.ci_low < 1.03 * 1.02 and s.ci_high > 1.03 / 1.02
    assert found >= 95


def test_cluster_bootstrap_is_fast_and_handles_uneven_placements():
    import time

    rng = np.random.default_rng(14)
    groups = [rng.lognormal(0, 0.01, n) for n in (7, 7, 6, 6, 6, 6, 6, 6)]
    started = time.perf_counter()
    low, high = cluster_bootstrap_median_ci(groups, resamples=2000)
    assert time.perf_counter() - started < 0.5
    assert low < float(np.median(np.concatenate(groups))) < high
    with pytest.raises(ValueError):
        cluster_bootstrap_median_ci(groups[:1])


def test_small_cluster_factor_is_the_t_correction():
    # Exact quantiles (a table of 3 decimals, and z beyond 30 degrees of freedom, before).
    assert small_cluster_factor(10) == pytest.approx(2.2622 / 1.96 * (10 / 9) ** 0.5, rel=1e-4)
    assert small_cluster_factor(100) == pytest.approx(1.9842 / 1.96 * (100 / 99) ** 0.5, rel=1e-4)


def _plan(**extra) -> Plan:
    config = AttentionConfig(
        name="c", batch=1, heads=2, seq_len=128, head_dim=64, dtype="float16", causal=False
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate="a",
        compared_with=["b"],
        reference="reference",
        samples_per_config=3,
        configs=[config],
        **extra,
    )


def _rows(times: dict[str, float], rounds: int = 3, placements: int = 1) -> list[Measurement]:
    now = datetime.now(timezone.utc)
    return [
        Measurement(
            run_id="r",
            config="c",
            implementation=impl,
            mode="single",
            round=r,
            placement=p,
            calls=1,
            latency_ms=ms * (1 + r / 100) * (1 + p / 50),
            timestamp=now,
        )
        for p in range(placements)
        for r in range(rounds)
        for impl, ms in times.items()
    ]


def test_summarize_fills_speedup_on_baseline_rows_only():
    rows = _rows({"a": 1.0, "b": 2.0})
    summary = summarize("r", _plan(), rows, {("c", "a"): "x", ("c", "b"): "y"}, peak_tflops=100.0)
    a, b = summary
    assert (a.implementation, a.backend, a.speedup) == ("a", "x", None)
    assert b.speedup == pytest.approx(2.0) and b.verdict == "faster" and b.versus == "a"
    flops = 4 * 1 * 2 * 128 * 128 * 64
    assert a.tflops == pytest.approx(flops / (a.median_ms * 1e-3) / 1e12)
    assert a.pct_of_peak == pytest.approx(a.tflops)  # peak 100 TFLOP/s


def test_the_control_is_compared_with_its_twin():
    plan = _plan(control="b", placements=4)
    rows = _rows({"a": 1.0, "b": 2.0, "b@aa": 2.0}, rounds=12, placements=4)
    summary = {s.implementation: s for s in summarize("r", plan, rows, {}, None)}
    assert summary["b"].versus == "a" and summary["b"].verdict == "faster"
    control = summary["b@aa"]
    assert control.versus == "b" and control.speedup == pytest.approx(1.0)
    assert control.verdict == "equivalent" and control.placements == 4


def test_a_result_above_the_peak_is_impossible_and_gets_no_verdict():
    # 4*1*2*128*128*64 FLOPs = 8.4 MFLOP: at 1 µs that is 8.4 TFLOP/s, over a 5 TFLOP/s peak.
    rows = _rows({"a": 0.001, "b": 0.002})
    summary = {s.implementation: s for s in summarize("r", _plan(), rows, {}, peak_tflops=5.0)}
    assert summary["a"].flag == "impossible" and summary["b"].flag is None
    assert summary["b"].speedup is not None and summary["b"].verdict is None  # versus "a"
    # bytes: q, k, v, out = 4 * 2*128*64 * 2 bytes = 131 kB; in 1 µs, 131 GB/s
    by_bandwidth = summarize("r", _plan(), rows, {}, None, peak_gbytes_per_s=100.0)
    assert [s.flag for s in by_bandwidth] == ["impossible", None]
    assert [s.flag for s in summarize("r", _plan(), rows, {}, 1000.0, 1000.0)] == [None, None]


def test_a_wrong_timed_output_is_flagged():
    rows = _rows({"a": 1.0, "b": 2.0})
    a, b = summarize("r", _plan(), rows, {}, None, wrong_outputs={("c", "b")})
    assert b.flag == "wrong-timed-output" and b.verdict is None and a.flag is None


# --- the geometric mean over configs (the A/B comparison's overall line) ----------------


def test_one_config_geomean_is_its_row():
    rng = np.random.default_rng(21)
    a, b = _aa_experiment(rng, 10, 5, between=0.01, within=0.01)
    row = paired_speedup(a, b, resamples=1000, seed=3)
    point, low, high, word = geomean_speedup([(a, b)], 0.01, resamples=1000, seed=3)
    assert (point, low, high) == pytest.approx((row.ratio, row.ci_low, row.ci_high))
    assert word == row.verdict(0.01)


@pytest.mark.slow
def test_geomean_of_aa_configs_has_about_five_percent_false_positives():
    rng = np.random.default_rng(22)
    wrong = 0
    for seed in range(200):
        configs = [_aa_experiment(rng, 10, 5, between=0.01, within=0.01) for _ in range(6)]
        wrong += geomean_speedup(configs, 0.0, resamples=500, seed=seed)[3] in DIFFERENT
    assert wrong / 200 <= 0.09


def test_geomean_finds_a_two_percent_slower_baseline_and_centres_on_it():
    rng = np.random.default_rng(23)
    configs = []
    for slowdown in (1.01, 1.02, 1.03):  # the geometric mean of these is 1.0199
        a, b = _aa_experiment(rng, 10, 5, between=0.003, within=0.01)
        configs.append(({k: v * slowdown for k, v in a.items()}, b))
    point, low, high, word = geomean_speedup(configs, 0.01, resamples=1000)
    assert low < 1.0199 < high and low < point < high
    assert word == "faster"


def test_overall_speedups_cover_every_compared_identity():
    plan = _plan(control="b", placements=4)
    rows = _rows({"a": 1.0, "b": 2.0, "b@aa": 2.0}, rounds=12, placements=4)
    summary = summarize("r", plan, rows, {}, None)
    overall = {(o.identity, o.versus): o for o in overall_speedups(plan, rows, summary)}
    assert set(overall) == {("b", "a"), ("b@aa", "b")}
    assert overall[("b", "a")].geomean == pytest.approx(2.0, rel=1e-3)
    assert overall[("b", "a")].verdict == "faster" and overall[("b", "a")].configs == 1


def test_a_noisy_interval_stays_positive():
    """Widened on a log scale: a ratio's interval never reaches zero, however wide."""
    low, high = widened(1.0, 0.2, 5.0, 3.0)
    assert 0 < low < 0.2 and high > 5.0
    assert widened(1.0, 0.5, 2.0, 1.0) == pytest.approx((0.5, 2.0))
