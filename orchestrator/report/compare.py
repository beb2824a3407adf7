"""`report --compare`: where two runs disagree, and whether they time the same candidate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.report.load import RunResults
from results_schema.intervals import bootstrap_median_ci

# Intervals from 50 samples are often narrower than run-to-run variation (measured on an
# H100: back-to-back medians moved up to 1.8%, with non-overlapping intervals), so a
# disagreement also needs the point estimates this far apart to be worth a flag.
MIN_RELATIVE_DIFFERENCE = 0.02


@dataclass(frozen=True)
class Disagreement:
    """A (config, implementation) whose interval in this run misses the other run's."""

    config: str
    implementation: str
    quantity: str  # "speedup" or "median_ms"
    this: tuple[float, float]
    other: tuple[float, float]
    relative_difference: float  # (this - other) / other, of the point estimates


def candidate_mismatch(this: RunResults, other: RunResults) -> str | None:
    """Two runs whose candidates differ (another implementation, or another tree of one
    kernel): their speedups are over different kernels, and a moved interval says that."""

    def described(run: RunResults) -> str | None:
        if run.plan is None:
            return None
        kernel = run.plan.user_kernel(run.plan.candidate)
        source = run.plan.candidate_source if kernel is None else kernel.source
        return run.plan.candidate + (f" ({source.label()})" if source else "")

    mine, theirs = described(this), described(other)
    if mine is None or theirs is None or mine == theirs:
        return None
    return f"the runs time different candidates: {mine} here, {theirs} in {other.run_id}"


def _disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def compare_runs(
    this: RunResults, other: RunResults, min_relative_difference: float = MIN_RELATIVE_DIFFERENCE
) -> list[Disagreement]:
    """(config, implementation)s whose speedup intervals, or whose median intervals, do not
    overlap between the runs and whose point estimates differ by at least the minimum."""
    found = []

    def check(key, quantity, a, b, point_a, point_b):
        change = (point_a - point_b) / point_b
        if _disjoint(a, b) and abs(change) >= min_relative_difference:
            found.append(Disagreement(key[0], key[1], quantity, a, b, change))

    other_summary = {(s.config, s.implementation): s for s in other.summary}
    for s in this.summary:
        o = other_summary.get((s.config, s.implementation))
        if o and s.speedup is not None and o.speedup is not None:
            check(
                (s.config, s.implementation),
                "speedup",
                (s.speedup_ci_low, s.speedup_ci_high),
                (o.speedup_ci_low, o.speedup_ci_high),
                s.speedup,
                o.speedup,
            )
    mine, theirs = this.latencies, other.latencies
    for key in sorted(mine.keys() & theirs.keys()):
        a, b = mine[key], theirs[key]
        check(
            key,
            "median_ms",
            bootstrap_median_ci(a),
            bootstrap_median_ci(b),
            float(np.median(a)),
            float(np.median(b)),
        )
    return found
