"""How long a run samples: looks at pre-set sample counts, and the error each look may spend.
One home for the VM, which samples by it (benches/sequential.py), and the controller, which
holds a run's record of it to its plan (orchestrator/boundary/manifest.py) and estimates its time.

A run with an A/B comparison samples until its gate's statistics are decided
(results_schema/gate_rule.py) or its bound is reached: the plan's samples per config (its
`sampling.max_samples_per_config`, by default SAMPLES_FACTOR times `samples_per_config`),
its seconds (`sampling.max_seconds`) and the run's time cap. Looking at 95% intervals after
every round and stopping once one clears the margin would make them wrong: each look is
another chance for an interval to miss, and a rule that stops at the first miss keeps it.
So the looks are set before the run: at the plan's samples per config, then doubling, up to
the bound (look_schedule); and the 5% chance a run may be wrong (FAMILY_ALPHA) is spent
across the looks in proportion to the samples each adds (look_alphas: α·Δn_k/N, a linear
α-spending function in the sense of Lan & DeMets, Biometrika 70, 1983), look k's intervals
made at confidence 1 - α_k. By Bonferroni's inequality the chance that any look's interval
misses the true value is at most Σ α_k = α, however the looks depend on each other and
whatever rule decides when to stop; so the interval of the look a run stopped at holds the
true value with probability at least 1 - α, and so does the gate's decision from it (a
one-sided one: at most α/2 of wrongly calling a slowdown). The price: a run that may take
three looks (20, 40, 80 samples) reports 98.75% intervals at its first two and 97.5% at its
last, against 95% for a run of one look; a plan without an A/B comparison has nothing to
decide and keeps one look at 95%. A run that gates every config (`--gate-on any`) splits each
look's α again, evenly over its gated statistics (the geometric mean and each config:
Plan.gate_family), by the same inequality: the chance any of them misses stays α.

stdlib only: the controller imports it without numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

FAMILY_ALPHA = 0.05  # 1 - CONFIDENCE (results_schema/intervals.py): one look's whole budget
SAMPLES_FACTOR = 4  # the default bound: this many times the plan's samples per config
# Why a run's sampling stopped (results_schema.models.SamplingRecord).
STOPS = {
    "decided": "every gated statistic decided, or the outcome fixed (a slowdown, a noisy run)",
    "max-samples": "the plan's bound on samples per config reached",
    "max-seconds": "the next look would end after the plan's sampling.max_seconds",
    "time-cap": "the next look would end after the run's time cap (or its phase's)",
    "incorrect": "the candidate failed a check: its gate fails whatever more samples say",
    "nothing-to-decide": "no A/B comparison to decide (or a repro of a few rows): one look",
    "interrupted": "stopped by a signal",
}


def look_schedule(first: int, most: int) -> list[int]:
    """Samples per config at each look: `first`, then doubling, the last at `most`."""
    counts = [first]
    while counts[-1] < most:
        counts.append(min(2 * counts[-1], most))
    return counts


def look_alphas(schedule: Sequence[int], alpha: float = FAMILY_ALPHA) -> list[float]:
    """The error each look may spend: α times the share of the most samples it adds."""
    most = schedule[-1]
    before = [0, *schedule[:-1]]
    return [alpha * (n - previous) / most for n, previous in zip(schedule, before, strict=True)]


def look_confidence(schedule: Sequence[int], look: int, alpha: float = FAMILY_ALPHA) -> float:
    """The confidence of the intervals made at look `look` (0 the first) of `schedule`."""
    return 1.0 - look_alphas(schedule, alpha)[look]


def level(confidence: float | None) -> str:
    """How an interval's confidence is shown: 95%, 97.5%, 98.75% (95% when unknown: a run
    from before statistics.json said)."""
    return f"{(1.0 - FAMILY_ALPHA if confidence is None else confidence) * 100:.4g}%"
