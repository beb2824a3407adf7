"""Was the machine quiet enough for this run's verdicts? The A/A control, judged once per run.

The control is one implementation timed twice under two names, so every interval it gets
against its twin should cover 1 ± δ. Judged row by row at 95%, a plan of K configs raises
a false alarm in up to 1 - 0.95^K of runs (26% at K = 6; 7 of 60 loaded 2-core CPU runs of
cpu-smoke did under that per-row rule). One decision for the whole control needs a
family-wise rule. Here: Bonferroni's simultaneous intervals (Dunn, "Multiple comparisons
among means", JASA 56, 1961) for each of the control's K judged configs and for their
geometric mean (K + 1 intervals; the mean catches a small shift shared by every config),
each at confidence 1 - α/(K + 1). The run is noisy when any lies wholly beyond [1-δ, 1+δ]:
for a truly identical pair the chance of that is at most α = 5%, whatever the dependence
between configs, as far as each interval holds its level. Holm's step-down test (Holm,
Scand. J. Statist. 6, 1979) rejects a little more often at the same α but has no intervals:
these can be printed, and re-judged at another margin (the gate does, at its own). Measured
on 104 loaded 2-core CPU runs of cpu-smoke: 2 runs noisy by this rule, 14 by the per-row
one; both alarms on one config whose control really differs (the round order is drawn from
the plan's seed, the same every run, and there the control more often follows its twin).

Each interval comes from the rows' own cluster bootstrap (benches.stats.log_bootstrap), but
as a t interval on the log scale: point ± t(P-1) at the interval's level × the bootstrap's
standard error × sqrt(P/(P-1)), cut to the observed ratios. A percentile interval cannot
serve at 99.3%: from 4 placements a resampled median takes at most 35 values, its 0.36%
tails are the most extreme of them, and widening those is guesswork (on 200 synthetic A/A
runs of 6 configs at δ = 0, 13.5% were called noisy that way, 7% with t intervals; at
δ = 1%, 1.5% and 0.5%).

Rows flagged quantised or bimodal (benches.timing_shape) are not judged: their medians are
chance. A control that could judge fewer than half of the run's configs cannot vouch for it
(a machine that split most of the control's timings into regimes was noisy), and the run is
noisy too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from benches.stats import LogBootstrap, PairKey, geometric_mean_of, log_bootstrap
from results_schema import Measurement, Plan, SummaryRow
from results_schema.intervals import BOOTSTRAP_RESAMPLES, student_t_quantile
from results_schema.models import ControlInterval, Noise

FAMILY_WISE_ALPHA = 0.05
METHOD = (
    "Bonferroni simultaneous intervals (family-wise at `confidence`: 95%, or a sampled "
    "run's last look's) for each judged config's control "
    "over its twin and for their geometric mean: t intervals on the log scale with the "
    "cluster bootstrap's standard error; noisy when any lies wholly beyond [1-δ, 1+δ], or "
    "when fewer than half the configs could be judged (flagged rows)"
)


def control_noise(
    plan: Plan,
    measurements: Iterable[Measurement],
    summary: Sequence[SummaryRow],
    alpha: float = FAMILY_WISE_ALPHA,
) -> Noise | None:
    """The run's noise decision, family-wise at `alpha` (a sampled run's last look spends
    less than the whole 5%: results_schema/sampling.py), or None for a plan without an A/A
    control."""
    control, twin = plan.control_identity, plan.control
    if control is None or twin is None:
        return None
    pairs: dict[tuple[str, str], dict[PairKey, float]] = defaultdict(dict)
    for m in measurements:
        if m.implementation in (control, twin):
            pairs[(m.config, m.implementation)][(m.placement, m.round)] = m.latency_ms
    rows = [r for r in summary if r.implementation == control and r.versus == twin]
    judged = [r.config for r in rows if r.verdict is not None]
    unjudged = [c.name for c in plan.configs if c.name not in judged]
    per_config = [(pairs[(c, control)], pairs[(c, twin)]) for c in judged]
    noise = Noise(
        control=control,
        verdict="quiet",
        reason="",
        margin=plan.margin,
        confidence=1 - alpha,
        intervals=_simultaneous(judged, per_config, plan, alpha),
        unjudged=unjudged,
        method=METHOD,
    )
    different = noise.different(plan.margin)
    noisy = bool(different) or not noise.vouches()
    return noise.model_copy(
        update={"verdict": "noisy" if noisy else "quiet", "reason": _reason(noise, different)}
    )


def _simultaneous(
    configs: list[str], per_config, plan: Plan, alpha: float
) -> list[ControlInterval]:
    seeds = {c.name: plan.seed + i for i, c in enumerate(plan.configs)}  # as the rows'
    boots = {
        config: log_bootstrap(aa, twin, BOOTSTRAP_RESAMPLES, np.random.default_rng(seeds[config]))
        for config, (aa, twin) in zip(configs, per_config, strict=True)
    }
    judged: dict[str | None, LogBootstrap] = {c: b for c, b in boots.items() if b is not None}
    if len(judged) >= 2:  # with one config, their mean is its row
        judged[None] = geometric_mean_of(list(judged.values()))
    confidence = 1 - alpha / max(len(judged), 1)
    return [_t_interval(config, boot, confidence) for config, boot in judged.items()]


def _t_interval(config: str | None, boot: LogBootstrap, confidence: float) -> ControlInterval:
    """point ± t(P-1) × SE × sqrt(P/(P-1)) on the log scale, within the observed ratios."""
    half = 0.0
    if boot.clusters >= 2:
        t = student_t_quantile((1 + confidence) / 2, boot.clusters - 1)
        half = t * float(np.std(boot.resampled)) * math.sqrt(boot.clusters / (boot.clusters - 1))
    low = min(max(boot.point - half, boot.least), boot.point)
    high = max(min(boot.point + half, boot.greatest), boot.point)
    return ControlInterval(
        config=config,
        speedup=math.exp(boot.point),
        ci_low=math.exp(low),
        ci_high=math.exp(high),
    )


def _reason(noise: Noise, different: list[ControlInterval]) -> str:
    control, intervals = noise.control, noise.intervals
    unjudged = len(noise.unjudged)
    skipped = f"; {unjudged} configs not judged (flagged rows)" if unjudged else ""
    if not noise.vouches():
        judged = sum(i.config is not None for i in intervals)
        total = judged + len(noise.unjudged)
        return (
            f"the A/A control {control} could judge only {judged} of {total} configs: the "
            "rest had bimodal or quantised timings (or none)"
        )
    if not different:
        return (
            f"the A/A control {control} held within ±{noise.margin:g} on all "
            f"{len(intervals)} simultaneous intervals{skipped}"
        )
    worst = max(different, key=lambda i: abs(i.speedup - 1))
    where = worst.config or "the geometric mean"
    return (
        f"the A/A control {control} was judged different from its twin on "
        f"{len(different)} of {len(intervals)} simultaneous intervals (worst: {where}, "
        f"{worst.speedup:.3g}x [{worst.ci_low:.3g}, {worst.ci_high:.3g}]){skipped}"
    )
