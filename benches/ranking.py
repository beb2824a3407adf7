"""Which of a run's candidates is fastest, with intervals that hold together (ranking.json).

Every candidate (the kernel under test, its variants, and the yardsticks and peers timed
beside it: every identity but the baseline, the A/A control and the correctness reference)
gets its speedup over the baseline (the A/B baseline; without one, the first implementation
compared with the candidate) per config and on the geometric mean over configs, as
benches/stats.py makes a row's: the median of the ratios of samples paired by (placement,
round), resampled by the cluster bootstrap (placements with two or more, else rounds).

Reading a "best" out of K candidates × C configs asks many questions at once: of K·C + K
intervals each at 95%, some miss by chance (with 8 variants and 4 configs, 40 intervals: a
few), and the leader is picked by the data, so the interval that makes it look best is the
one most likely to be a lucky one. So the intervals are simultaneous: the chance that ANY of
them misses its true value is at most α (5%, or a sampled run's last look's), over the whole
family: every candidate's speedup on every config, on the geometric mean, and every pair of
candidates' ratio on the geometric mean (which the best and the tie are read from).

How: the max-|t| bootstrap (Westfall & Young, "Resampling-Based Multiple Testing", 1993,
ch. 2; Romano & Wolf, Econometrica 73, 2005, for its validity). Every resample draws the
same clusters for the baseline and every candidate (they were timed in the same rounds), so
the family's members move together as they did in the run; each member's spread is its
bootstrap standard error on the log scale, q is the 1 - α quantile over resamples of the
largest |resampled - point| / SE across the family, and each interval is point ± q × SE,
widened for few clusters as every interval of a run is (t(P-1) at the level q stands for,
× sqrt(P/(P-1)): benches/noise.py, benches/stats.py) and cut to the observed paired ratios.
Why not Bonferroni (benches/noise.py's rule for its few control intervals): its t
intervals at α/m assume each member's resampled t has normal tails, and a median's has
heavier ones (a resampled median jumps between the few middle values). On synthetic runs
(tests/unit/test_ranking.py's model) the max-|t| quantile came out at or above
Bonferroni's normal one: 2.9 against 2.87 for 12 members (3 variants, 2 configs), 3.4-3.8
against 3.38 for 68 (8 variants, 4 configs; 24 to 600 rounds); the share of null runs in
which any interval missed was 0.7-3% with max-|t| and 4-5.5% with Bonferroni's t intervals
(150-400 runs each). So max-|t| holds its level without assuming the tails, at the price of
intervals up to about 10% wider there, and where the members move together more than in
that model (a baseline noisier than its candidates) q falls toward a single interval's
1.96, which Bonferroni cannot. Nor Bonferroni's percentile intervals: their α/2m tails are
one or two of 2000 resamples, where the max-|t| quantile is read from the top 5% of them.

The leader is the candidate with the highest geometric-mean speedup. It is named best only
when its ratio over the runner-up is shown above 1 (that interval, simultaneous with the
rest, excludes 1); otherwise the ranking names the tied set: every candidate whose ratio
to the leader is not shown above 1. A candidate lacking usable rows on a config the
baseline has (no samples: its build or gate failed; or a flagged row: impossible, a wrong
timed output, quantised or bimodal) is left out of the ranking with the reason, as its
geometric mean would cover other configs than the rest's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from statistics import NormalDist

import numpy as np

from benches.stats import LogBootstrap, PairKey, geometric_mean_of, row_medians
from results_schema import Measurement, Plan, SummaryRow
from results_schema.intervals import BOOTSTRAP_RESAMPLES, CONFIDENCE, student_t_quantile
from results_schema.ranking import (
    MAX_CONFIG_INTERVALS,
    ConfigSpeedup,
    RankedCandidate,
    RankedInterval,
    Ranking,
    Unranked,
)

# The per-member level the max-|t| quantile stands for, kept below 1 (a float's 1.0 has no
# t quantile).
MOST_LEVEL = 1 - 1e-12


def ranking_sides(plan: Plan) -> tuple[str, list[str]]:
    """The baseline every speedup is over, and the candidates ranked against it."""
    if plan.comparison is not None:
        baseline = plan.comparison.baseline
    else:
        others = [i for i in plan.compared_with if i not in (plan.candidate, plan.reference)]
        baseline = others[0] if others else plan.compared_with[0]
    left_out = {baseline, plan.control_identity, plan.reference}
    return baseline, [i for i in plan.identities if i not in left_out]


def rank(
    plan: Plan,
    measurements: Iterable[Measurement],
    summary: Sequence[SummaryRow],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Ranking | None:
    """The run's ranking at family-wise `confidence`; None when it has no candidate."""
    baseline, candidates = ranking_sides(plan)
    if not candidates:
        return None
    pairs: dict[tuple[str, str], dict[PairKey, float]] = defaultdict(dict)
    for m in measurements:
        pairs[(m.config, m.implementation)][(m.placement, m.round)] = m.latency_ms
    flags = {(r.config, r.implementation): r.flag for r in summary if r.flag}
    configs = [
        c.name
        for c in plan.configs
        if pairs.get((c.name, baseline)) and not flags.get((c.name, baseline))
    ]
    reasons = {i: _why_unranked(i, baseline, configs, pairs, flags) for i in candidates}
    unranked = [Unranked(identity=i, reason=why) for i, why in reasons.items() if why]
    ranked = [i for i, why in reasons.items() if not why]
    family = _family(ranked, baseline, configs, pairs, resamples, np.random.default_rng(plan.seed))
    mean = {i: family[_geomean_key(i, configs)] for i in ranked}
    intervals = simultaneous(family, confidence)
    order = sorted(ranked, key=lambda i: -mean[i].point)  # stable: the plan's order on ties
    per_config = len(ranked) * len(configs) <= MAX_CONFIG_INTERVALS
    listed = configs if per_config else []
    placed = [
        _placed(n, i, order, configs, listed, intervals, mean) for n, i in enumerate(order, 1)
    ]
    tied = [c.identity for c in placed if c.tied_with_leader]
    return Ranking(
        baseline=baseline,
        confidence=confidence,
        family=max(len(intervals), 1),
        resamples=resamples,
        description=_description(confidence, len(intervals), plan.placements),
        configs=configs,
        candidates=placed,
        best=order[0] if len(tied) == 1 else None,
        tied=tied,
        unranked=unranked,
        per_config=per_config,
    )


def _family(ranked, baseline, configs, pairs, resamples, rng) -> dict[tuple, LogBootstrap]:
    """The family's members by key: (candidate, config); (candidate, None), its geometric
    mean over the configs (with one config, the mean is its row); (a, b), a's geometric mean
    over b's. All from the same resamples."""
    family: dict[tuple, LogBootstrap] = {}
    for config in configs if ranked else []:
        boots = joint_log_bootstraps(
            pairs[(config, baseline)], {i: pairs[(config, i)] for i in ranked}, resamples, rng
        )
        for identity, boot in boots.items():
            family[(identity, config)] = boot
    if len(configs) > 1:
        for identity in ranked:
            family[(identity, None)] = geometric_mean_of([family[(identity, c)] for c in configs])
    mean = {i: family[_geomean_key(i, configs)] for i in ranked}
    for a, b in combinations(ranked, 2):
        family[(a, b)] = _ratio(mean[a], mean[b])
    return family


def _geomean_key(identity: str, configs: list[str]) -> tuple[str, str | None]:
    """The family's key of a candidate's geometric mean: its one config's row if only one."""
    return (identity, None) if len(configs) > 1 else (identity, configs[0])


def _why_unranked(identity, baseline, configs, pairs, flags) -> str | None:
    if not any(p for (_, i), p in pairs.items() if i == identity):
        return "no timed samples (its build or its correctness gate failed)"
    if not configs:
        return f"the baseline {baseline} has no usable row on any config"
    missing = [
        c for c in configs if not set(pairs.get((c, identity), ())) & set(pairs[(c, baseline)])
    ]
    flagged = [f"{c} ({flags[(c, identity)]})" for c in configs if flags.get((c, identity))]
    if missing or flagged:
        where = ", ".join([*(f"{c} (no samples)" for c in missing), *flagged][:4])
        return f"not comparable on every config the baseline has: {where}"[:300]
    return None


def joint_log_bootstraps(
    baseline: Mapping[PairKey, float],
    candidates: Mapping[str, Mapping[PairKey, float]],
    resamples: int,
    rng,
) -> dict[str, LogBootstrap]:
    """Each candidate's median paired ratio baseline/candidate on one config and its cluster
    bootstrap, all candidates resampled with the SAME clusters (benches.stats.log_bootstrap
    draws its own for one pair), over the rounds the baseline and every candidate share."""
    shared = set(baseline)
    for found in candidates.values():
        shared &= set(found)
    keys = sorted(shared)
    placements = sorted({k[0] for k in keys})
    if len(placements) >= 2:
        clusters = [[k for k in keys if k[0] == p] for p in placements]
    else:
        clusters = [[k] for k in keys]
    chosen = rng.integers(0, len(clusters), size=(resamples, len(clusters)))
    width = max(len(c) for c in clusters)
    result = {}
    for identity, found in candidates.items():
        padded = np.full((len(clusters), width), np.nan)
        for i, cluster in enumerate(clusters):
            padded[i, : len(cluster)] = [baseline[k] / found[k] for k in cluster]
        values = padded[~np.isnan(padded)]
        result[identity] = LogBootstrap(
            point=float(np.log(np.median(values))),
            resampled=np.log(row_medians(padded[chosen].reshape(resamples, -1))),
            clusters=len(clusters),
            least=float(np.log(values.min())),
            greatest=float(np.log(values.max())),
        )
    return result


def _ratio(a: LogBootstrap, b: LogBootstrap) -> LogBootstrap:
    """a's speedup over b's, resample by resample (both from the same clusters)."""
    return LogBootstrap(
        point=a.point - b.point,
        resampled=a.resampled - b.resampled,
        clusters=min(a.clusters, b.clusters),
        least=a.least - b.greatest,
        greatest=a.greatest - b.least,
    )


def simultaneous(family: Mapping, confidence: float) -> dict:
    """Every member's (point, low, high) on the log scale, by the max-|t| bootstrap (the
    module's docstring). `family` maps a key to a LogBootstrap, all from the same resamples."""
    if not family:
        return {}
    members = list(family.values())
    points = np.array([m.point for m in members])
    resampled = np.stack([m.resampled for m in members], axis=1)
    errors = resampled.std(axis=0, ddof=1)
    moving = errors > 0
    q = 0.0
    if moving.any():
        largest = np.abs(resampled[:, moving] - points[moving]) / errors[moving]
        q = float(np.quantile(largest.max(axis=1), confidence))
    level = min(2 * NormalDist().cdf(q) - 1, MOST_LEVEL)
    factors = {p: _small_cluster(p, q, level) for p in {m.clusters for m in members}}
    return {
        key: _interval(m, q * factors[m.clusters] * float(e))
        for (key, m), e in zip(family.items(), errors, strict=True)
    }


def _small_cluster(clusters: int, q: float, level: float) -> float:
    """t(P-1) at the level q stands for, over q, × sqrt(P/(P-1)) (benches.stats)."""
    if clusters < 2 or q <= 0:
        return 1.0
    t = student_t_quantile((1 + level) / 2, clusters - 1)
    return t / q * math.sqrt(clusters / (clusters - 1))


def _interval(boot: LogBootstrap, half: float) -> tuple[float, float, float]:
    """(point, low, high) on the log scale: point ± half, within the observed ratios."""
    low = min(max(boot.point - half, boot.least), boot.point)
    high = max(min(boot.point + half, boot.greatest), boot.point)
    return boot.point, low, high


def _ratio_interval(found: tuple[float, float, float], flip: bool = False) -> RankedInterval:
    point, low, high = (-found[0], -found[2], -found[1]) if flip else found
    return RankedInterval(speedup=math.exp(point), ci_low=math.exp(low), ci_high=math.exp(high))


def _placed(number, identity, order, configs, listed, intervals, mean) -> RankedCandidate:
    leader = order[0]
    versus = None
    if identity != leader:
        key = (leader, identity) if (leader, identity) in intervals else (identity, leader)
        versus = _ratio_interval(intervals[key], flip=key[0] != leader)
    return RankedCandidate(
        identity=identity,
        rank=number,
        geomean=_ratio_interval(intervals[_geomean_key(identity, configs)]),
        configs=[
            ConfigSpeedup(config=c, **_ratio_interval(intervals[(identity, c)]).model_dump())
            for c in listed
        ],
        versus_leader=versus,
        tied_with_leader=versus is None or versus.ci_low <= 1,
    )


def _description(confidence: float, family: int, placements: int) -> str:
    clusters = f"{placements} placements" if placements >= 2 else "rounds"
    return (
        f"{confidence:.4g} family-wise over {family} intervals (every candidate's speedup "
        "over the baseline per config and on the geometric mean, and every pair of "
        "candidates' geometric means): max-|t| bootstrap, the baseline and every candidate "
        f"resampled together by {clusters}, on the log scale, widened by t(P-1) for few "
        "clusters and kept within the observed paired ratios; best only when shown faster "
        "than the runner-up"
    )
