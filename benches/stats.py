"""Summaries of timed samples and paired speedups with bootstrap confidence intervals."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from results_schema import Measurement, Plan, SummaryRow

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Distribution:
    n: int
    median: float
    p10: float
    p90: float
    mean: float
    std: float
    iqr_over_median: float


@dataclass(frozen=True)
class Speedup:
    """Candidate over a baseline: the median of per-round ratios baseline/candidate."""

    ratio: float
    ci_low: float
    ci_high: float
    pairs: int

    @property
    def verdict(self) -> str:
        if self.ci_low > 1.0:
            return "faster"
        if self.ci_high < 1.0:
            return "slower"
        return "indistinguishable"


def describe(latencies_ms: Sequence[float]) -> Distribution:
    x = np.asarray(latencies_ms, dtype=np.float64)
    p10, p25, median, p75, p90 = np.percentile(x, [10, 25, 50, 75, 90])
    return Distribution(
        n=int(x.size),
        median=float(median),
        p10=float(p10),
        p90=float(p90),
        mean=float(x.mean()),
        std=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        iqr_over_median=float((p75 - p25) / median) if median > 0 else 0.0,
    )


def bootstrap_median_ci(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (CONFIDENCE level)."""
    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def paired_speedup(
    baseline_by_round: Mapping[int, float],
    candidate_by_round: Mapping[int, float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Speedup | None:
    """Pairs samples of the same round (run back to back, interleaved), so slow drift
    cancels in each ratio; None when no round has both."""
    rounds = sorted(set(baseline_by_round) & set(candidate_by_round))
    if not rounds:
        return None
    ratios = np.array([baseline_by_round[r] / candidate_by_round[r] for r in rounds])
    low, high = (
        bootstrap_median_ci(ratios, resamples, seed)
        if ratios.size > 1
        else (float(ratios[0]), float(ratios[0]))
    )
    return Speedup(float(np.median(ratios)), low, high, int(ratios.size))


def summarize(
    run_id: str,
    plan: Plan,
    measurements: Iterable[Measurement],
    backends: Mapping[tuple[str, str], str],
    peak_tflops: float | None,
) -> list[SummaryRow]:
    """One row per (config, implementation) that has samples, in plan order; baseline rows
    carry the candidate's speedup over them."""
    by_key: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        by_key[(m.config, m.implementation)].append(m)
    rows = []
    for index, config in enumerate(plan.configs):
        candidate = by_key.get((config.name, plan.candidate), [])
        for name in plan.implementations:
            samples = by_key.get((config.name, name))
            if not samples:
                continue
            speedup = None
            if name != plan.candidate and candidate:
                speedup = paired_speedup(
                    _by_round(samples), _by_round(candidate), seed=plan.seed + index
                )
            rows.append(_summary_row(run_id, config, name, samples, backends, peak_tflops, speedup))
    return rows


def _by_round(samples: list[Measurement]) -> dict[int, float]:
    return {m.round: m.latency_ms for m in samples}


def _summary_row(run_id, config, name, samples, backends, peak_tflops, speedup) -> SummaryRow:
    dist = describe([m.latency_ms for m in samples])
    tflops = config.flops() / (dist.median * 1e-3) / 1e12
    return SummaryRow(
        run_id=run_id,
        config=config.name,
        implementation=name,
        backend=backends.get((config.name, name), "unknown"),
        mode=samples[0].mode,
        n=dist.n,
        median_ms=dist.median,
        p10_ms=dist.p10,
        p90_ms=dist.p90,
        mean_ms=dist.mean,
        std_ms=dist.std,
        iqr_over_median=dist.iqr_over_median,
        tflops=tflops,
        pct_of_peak=_pct_of_peak(config, tflops, peak_tflops),
        throttled_samples=sum(m.throttled for m in samples),
        speedup=speedup.ratio if speedup else None,
        speedup_ci_low=speedup.ci_low if speedup else None,
        speedup_ci_high=speedup.ci_high if speedup else None,
        verdict=speedup.verdict if speedup else None,
    )


def _pct_of_peak(config, tflops: float, peak_tflops: float | None) -> float | None:
    """The known peak is the dense 16-bit tensor rate: other dtypes get no percentage."""
    if not peak_tflops or config.dtype not in ("float16", "bfloat16"):
        return None
    return 100.0 * tflops / peak_tflops
