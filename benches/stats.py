"""Summaries of timed samples, paired speedups with intervals a rerun would respect, verdicts.

A speedup is the median of paired ratios baseline/candidate, a pair being two samples of the
same round (run back to back, in random order). Its interval must hold the variance a rerun
sees, and most of that lies between placements (buffers, graph captures: measured on an H100,
A/A verdicts came out `faster`/`slower` 28% of the time when the interval resampled rounds
alone). So, with two or more placements per config, the interval is a cluster bootstrap:
placements are resampled with replacement, each bringing all its pairs, and the median of the
pooled ratios is taken; the percentile interval is then widened (on the log scale) by
t(P-1)/z * sqrt(P/(P-1)), the small-sample correction for an estimate from P clusters
(the bootstrap's spread alone understates it for few clusters). With one placement, rounds
are resampled (the old method).

An interval never reaches beyond the paired ratios observed: no resample's median can, and
the widening is an extrapolation. Without that bound a loaded CPU gave `sdpa@aa 1.47x [1.01,
547.39]`: of 4 placements one sat in another regime (a scheduler quantum of ~8 ms against
15 µs calls), a resample drew it twice or more one time in four, the pooled median of an
even count averaged across the gap, and t(3)/z*sqrt(4/3) = 1.88 raised that tail to its
1.88th power on the log scale. Rows whose samples split into such regimes get no verdict
at all (benches.timing_shape). With few placements the round bootstrap is no remedy: of the
297 unflagged A/A rows of 60 loaded 2-core CPU runs (4 placements) it called 6.1% different
at δ = 1%, the cluster bootstrap 2.4%.

A verdict reads the interval against the margin δ (results_schema/verdicts.py): `slower`
wholly below 1-δ, `faster` wholly above 1+δ, `equivalent` inside [1-δ, 1+δ], `not-slower`
from at or above 1-δ to beyond 1+δ, otherwise `undecided`.
A row faster than the GPU's peak compute or memory bandwidth permits is flagged `impossible`,
one whose samples are quantised or bimodal (benches.timing_shape) is flagged so, and neither
it nor a comparison with it gets a verdict.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from benches.timing_shape import shape_flag
from results_schema import (
    AttentionConfig,
    IntervalMethod,
    Measurement,
    OverallSpeedup,
    Plan,
    SummaryRow,
)
from results_schema.gpu_kinds import DensePeaks, as_dense_peaks, percent_of_peak
from results_schema.intervals import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    bootstrap_median_ci,
    percentile_tails,
    student_t_quantile,
)
from results_schema.verdicts import verdict

ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1}
# An input dtype whose output is another: FP8 attention answers in bfloat16 (benches/fp8.py).
OUTPUT_BYTES = {"float8_e4m3fn": 2}
PairKey = tuple[int, int]  # (placement, round)


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
    """Candidate over a baseline: the median of paired ratios baseline/candidate."""

    ratio: float
    ci_low: float
    ci_high: float
    pairs: int
    placements: int

    def verdict(self, margin: float) -> str:
        return verdict(self.ci_low, self.ci_high, margin)


def interval_method(plan: Plan, confidence: float = CONFIDENCE) -> IntervalMethod:
    """What statistics.json (and so the manifest) says about how intervals were made, at
    `confidence`: the last look's (results_schema/sampling.py)."""
    clustered = plan.placements >= 2
    level = f"{confidence * 100:.4g}%"
    schedule = plan.look_schedule()
    looks = (
        f" at the look a run stopped at, of {len(schedule)} set at {schedule} samples per "
        "config, each look's error spent in proportion to the samples it adds (the chance any "
        f"look's interval misses is at most {1 - CONFIDENCE:.0%}: results_schema/sampling.py)"
        if len(schedule) > 1
        else ""
    )
    per_look = f" per {schedule[0]} samples" if len(schedule) > 1 else ""
    text = (
        f"{level} interval of the median paired ratio{looks}: cluster bootstrap over "
        f"{plan.placements} placements per config{per_look} (fresh buffers and graph "
        "captures each), percentile interval widened on the log scale by "
        "t(P-1)/z*sqrt(P/(P-1)) and kept within the observed paired ratios; verdicts read "
        f"it against [1-δ, 1+δ], δ={plan.margin:g}; bimodal or quantised rows get none"
        if clustered
        else f"{level} percentile bootstrap over rounds of one placement{looks} (placement "
        f"variance not included); verdicts read it against [1-δ, 1+δ], δ={plan.margin:g}; "
        "bimodal or quantised rows get none"
    )
    return IntervalMethod(
        method="placement-cluster-bootstrap" if clustered else "round-bootstrap",
        description=text,
        confidence=confidence,
        resamples=BOOTSTRAP_RESAMPLES,
        placements=plan.placements,
        margin=plan.margin,
        control=plan.control_identity,
    )


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


def small_cluster_factor(clusters: int, confidence: float = CONFIDENCE) -> float:
    """t(P-1)/z * sqrt(P/(P-1)): how much wider than the bootstrap's own an interval from P
    clusters must be (the bootstrap divides the spread by P, not P-1, and its percentiles
    are normal quantiles where P-1 degrees of freedom call for Student's)."""
    level = (1 + confidence) / 2
    df = clusters - 1
    t = student_t_quantile(level, df)
    return t / NormalDist().inv_cdf(level) * float(np.sqrt(clusters / df))


def within(low: float, high: float, least: float, greatest: float) -> tuple[float, float]:
    """The interval cut to what the data allow: [least, greatest] of the observed ratios."""
    return min(max(low, least), greatest), max(min(high, greatest), least)


def row_medians(samples: np.ndarray) -> np.ndarray:
    """Median of each row, ignoring NaN padding, without numpy's slow per-row nanmedian."""
    ordered = np.sort(samples, axis=1)  # NaN sorts last
    counts = np.sum(~np.isnan(samples), axis=1)
    low = np.take_along_axis(ordered, ((counts - 1) // 2)[:, None], axis=1)[:, 0]
    high = np.take_along_axis(ordered, (counts // 2)[:, None], axis=1)[:, 0]
    return (low + high) / 2


def cluster_bootstrap_median_ci(
    groups: Sequence[Sequence[float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Interval of the median of all values when groups (placements) are the independent
    units: resample groups with replacement, take the pooled median, widen the percentile
    interval around the point estimate by small_cluster_factor, and cut it to the values'
    range (no resample's median leaves it; only the widening could)."""
    if len(groups) < 2:
        raise ValueError("a cluster bootstrap needs at least two groups")
    width = max(len(g) for g in groups)
    padded = np.full((len(groups), width), np.nan)
    for i, g in enumerate(groups):
        padded[i, : len(g)] = g
    rng = np.random.default_rng(seed)
    chosen = padded[rng.integers(0, len(groups), size=(resamples, len(groups)))]
    medians = row_medians(chosen.reshape(resamples, -1))
    low, high = np.percentile(medians, percentile_tails(confidence))
    values = padded[~np.isnan(padded)]
    point = float(np.median(values))
    factor = small_cluster_factor(len(groups), confidence)
    low, high = widened(point, float(low), float(high), factor)
    return within(low, high, float(values.min()), float(values.max()))


def widened(point: float, low: float, high: float, factor: float) -> tuple[float, float]:
    """The interval [low, high] around point, `factor` times as wide. Latencies and their
    ratios are positive and scale multiplicatively, so the widening is done on the log
    scale: a wide interval of a ratio stays above zero (linear widening of 5 noisy CPU
    placements once gave a speedup interval starting at -2.15)."""
    if point > 0 and low > 0:
        return point * (low / point) ** factor, point * (high / point) ** factor
    return point - factor * (point - low), point + factor * (high - point)


def paired_speedup(
    baseline: Mapping[PairKey, float],
    candidate: Mapping[PairKey, float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Speedup | None:
    """Pairs samples of the same (placement, round), so slow drift cancels in each ratio;
    None when no round has both."""
    keys = sorted(set(baseline) & set(candidate))
    if not keys:
        return None
    groups: dict[int, list[float]] = defaultdict(list)
    for key in keys:
        groups[key[0]].append(baseline[key] / candidate[key])
    ratios = np.array([r for g in groups.values() for r in g])
    if len(groups) >= 2:
        low, high = cluster_bootstrap_median_ci(list(groups.values()), resamples, seed, confidence)
    elif ratios.size > 1:
        low, high = bootstrap_median_ci(ratios, resamples, seed, confidence)
    else:
        low = high = float(ratios[0])
    return Speedup(float(np.median(ratios)), low, high, int(ratios.size), len(groups))


@dataclass(frozen=True)
class LogBootstrap:
    """A median paired ratio and its cluster bootstrap, on the log scale."""

    point: float  # log of the median of the paired ratios
    resampled: np.ndarray  # log of each resample's median
    clusters: int  # placements resampled (rounds, with one placement)
    least: float  # log of the least paired ratio
    greatest: float  # log of the greatest


def log_bootstrap(
    baseline: Mapping[PairKey, float], candidate: Mapping[PairKey, float], resamples: int, rng
) -> LogBootstrap | None:
    """Placements resampled with replacement, each bringing all its pairs; with one
    placement, every pair is its own cluster (the round bootstrap). None without pairs."""
    groups: dict[int, list[float]] = defaultdict(list)
    for key in sorted(set(baseline) & set(candidate)):
        groups[key[0]].append(baseline[key] / candidate[key])
    if not groups:
        return None
    clusters = list(groups.values())
    if len(clusters) == 1:
        clusters = [[r] for r in clusters[0]]
    width = max(len(g) for g in clusters)
    padded = np.full((len(clusters), width), np.nan)
    for i, g in enumerate(clusters):
        padded[i, : len(g)] = g
    chosen = padded[rng.integers(0, len(clusters), size=(resamples, len(clusters)))]
    values = padded[~np.isnan(padded)]
    return LogBootstrap(
        point=float(np.log(np.median(values))),  # the row's own point, as paired_speedup's
        resampled=np.log(row_medians(chosen.reshape(resamples, -1))),
        clusters=len(clusters),
        least=float(np.log(values.min())),
        greatest=float(np.log(values.max())),
    )


def geometric_mean_of(boots: Sequence[LogBootstrap]) -> LogBootstrap:
    """The geometric mean over configs, resample by resample (each config's placements were
    resampled on their own: they are independent clusters); as few clusters as the fewest."""
    return LogBootstrap(
        point=float(np.mean([b.point for b in boots])),
        resampled=np.mean([b.resampled for b in boots], axis=0),
        clusters=min(b.clusters for b in boots),
        least=float(np.mean([b.least for b in boots])),
        greatest=float(np.mean([b.greatest for b in boots])),
    )


def geomean_speedup(
    per_config: Sequence[tuple[Mapping[PairKey, float], Mapping[PairKey, float]]],
    margin: float,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float, str] | None:
    """The geometric mean over configs of the median paired ratio (baseline/candidate),
    with the same cluster bootstrap as each config's interval (geometric_mean_of), the
    percentile interval widened by small_cluster_factor of the fewest placements, then cut
    to the geometric means of the configs' least and greatest ratios.
    Returns (geomean, low, high, verdict), or None without pairs."""
    rng = np.random.default_rng(seed)
    boots = [log_bootstrap(b, c, resamples, rng) for b, c in per_config]
    boots = [b for b in boots if b is not None]
    if not boots:
        return None
    mean = geometric_mean_of(boots)
    point = float(np.exp(mean.point))
    low, high = np.exp(np.percentile(mean.resampled, percentile_tails(confidence)))
    factor = small_cluster_factor(mean.clusters, confidence) if mean.clusters >= 2 else 1.0
    low, high = widened(point, float(low), float(high), factor)
    low, high = within(low, high, float(np.exp(mean.least)), float(np.exp(mean.greatest)))
    return point, low, high, verdict(low, high, margin)


def overall_speedups(
    plan: Plan,
    measurements: Iterable[Measurement],
    summary: Sequence[SummaryRow],
    confidence: float = CONFIDENCE,
) -> list[OverallSpeedup]:
    """For every identity compared with another (a baseline with the candidate, the A/A
    control with its twin): the geometric-mean speedup over the configs whose rows got a
    verdict (a flagged row says nothing about speed)."""
    samples: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        samples[(m.config, m.implementation)].append(m)
    compared: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in summary:
        if row.versus and row.verdict:
            compared[(row.implementation, row.versus)].append(row.config)
    method = (
        "geometric mean over configs of the median paired ratio; interval: each config's "
        "placements resampled on their own, as for its row"
    )
    result = []
    for (identity, versus), configs in compared.items():
        pairs = [
            (_by_pair(samples[(c, identity)]), _by_pair(samples[(c, versus)])) for c in configs
        ]
        found = geomean_speedup(pairs, plan.margin, seed=plan.seed, confidence=confidence)
        if found is None:
            continue
        point, low, high, word = found
        result.append(
            OverallSpeedup(
                identity=identity,
                versus=versus,
                configs=len(configs),
                geomean=point,
                ci_low=low,
                ci_high=high,
                verdict=word,
                method=method,
            )
        )
    return result


# --- physical limits ---------------------------------------------------------------------


def attention_bytes(config: AttentionConfig) -> float:
    """The least memory traffic of a forward attention: read q, k, v, write the output
    (k and v with their own head count under grouped-query attention; an FP8 config's
    output in bfloat16)."""
    per_head = config.batch * config.seq_len * config.head_dim
    element = ELEMENT_BYTES[config.dtype]
    inputs = (config.heads + 2 * config.key_heads) * element
    output = config.heads * OUTPUT_BYTES.get(config.dtype, element)
    return float((inputs + output) * per_head)


def impossible(
    config, median_ms: float, peak_tflops: DensePeaks | float | None, peak_gbytes_per_s
) -> bool:
    """Faster than the dense tensor peak of the config's dtype (16-bit or FP8: the table
    holds no other) or the peak memory bandwidth allows."""
    seconds = median_ms * 1e-3
    peak = as_dense_peaks(peak_tflops).for_dtype(config.dtype)
    if peak and config.flops() / seconds / 1e12 > peak:
        return True
    return bool(peak_gbytes_per_s) and attention_bytes(config) / seconds / 1e9 > peak_gbytes_per_s


# --- summary.csv -------------------------------------------------------------------------


def summarize(
    run_id: str,
    plan: Plan,
    measurements: Iterable[Measurement],
    backends: Mapping[tuple[str, str], str],
    peak_tflops: DensePeaks | float | None,
    peak_gbytes_per_s: float | None = None,
    wrong_outputs: Collection[tuple[str, str]] = (),
    confidence: float = CONFIDENCE,
) -> list[SummaryRow]:
    """One row per (config, identity) that has samples, in plan order; baseline rows carry
    the candidate's speedup over them, the A/A control's row its speedup over its twin,
    with an interval at `confidence`. `wrong_outputs` are (config, identity) whose
    timed-loop outputs failed their check."""
    by_key: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        by_key[(m.config, m.implementation)].append(m)
    rows = []
    for index, config in enumerate(plan.configs):
        flags = {}
        for name in plan.identities:
            samples = by_key.get((config.name, name))
            if (config.name, name) in wrong_outputs:
                flags[name] = "wrong-timed-output"
            elif samples and impossible(
                config, describe(_latencies(samples)).median, peak_tflops, peak_gbytes_per_s
            ):
                flags[name] = "impossible"
            elif samples and (shape := shape_flag(_latencies(samples))):
                flags[name] = shape
        for name in plan.identities:
            samples = by_key.get((config.name, name))
            if not samples:
                continue
            versus = _versus(plan, name)
            speedup = None
            if versus and by_key.get((config.name, versus)):
                speedup = paired_speedup(
                    _by_pair(samples),
                    _by_pair(by_key[(config.name, versus)]),
                    seed=plan.seed + index,
                    confidence=confidence,
                )
            row = _summary_row(run_id, config, name, samples, backends, peak_tflops, speedup)
            flagged = flags.get(name) or (flags.get(versus) if speedup else None)
            verdict_now = speedup.verdict(plan.margin) if speedup and not flagged else None
            rows.append(
                row.model_copy(
                    update={
                        "versus": versus if speedup else None,
                        "verdict": verdict_now,
                        "flag": flags.get(name),
                    }
                )
            )
    return rows


def _versus(plan: Plan, identity: str) -> str | None:
    """Who this identity is compared with: the control with its twin, a baseline with the
    candidate, the candidate with nobody."""
    if identity == plan.control_identity:
        return plan.control
    return None if identity == plan.candidate else plan.candidate


def _latencies(samples: list[Measurement]) -> list[float]:
    return [m.latency_ms for m in samples]


def _by_pair(samples: list[Measurement]) -> dict[PairKey, float]:
    return {(m.placement, m.round): m.latency_ms for m in samples}


def _summary_row(run_id, config, name, samples, backends, peak_tflops, speedup) -> SummaryRow:
    dist = describe(_latencies(samples))
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
        placements=len({m.placement for m in samples}),
    )


def _pct_of_peak(config, tflops: float, peak_tflops: DensePeaks | float | None) -> float | None:
    """Of the dense tensor peak of the config's dtype: 16-bit and FP8 configs get one, the
    others (no peak known) none."""
    return percent_of_peak(tflops, as_dense_peaks(peak_tflops).for_dtype(config.dtype))
