"""What the performance gate judges, and which of its statistics are still open: one home for
the VM, which samples until they are decided (benches/sequential.py), and the controller's
gate (orchestrator/service/gate.py), which judges the fetched run by the same rule.

The gated statistics are the candidate's speedups over the A/B baseline: their geometric
mean over the compared configs always, and with gate_on `any` each config's as well. Each is
judged by results_schema.verdicts at the margin: slower (its interval wholly below
1 - margin) is a regression; shown not slower (its lower bound at or above 1 - margin) is
what a pass needs; anything else is undecided. A config flagged bimodal or quantised has no
interval, so under `any` it is undecided.

A pass also needs the run's A/A control (one implementation timed under two names) shown
equivalent within the margin on its geometric mean: the run must show that it tells two
identical implementations apart by less than the margin, not merely that it could not tell
them apart (an interval of [0.62, 2.0] for identical code vouches for nothing). A control
judged different (the run's noise decision, benches.noise, at the margin) makes the run
unable to tell whatever its other intervals say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from results_schema.models import GateOn, Noise, OverallSpeedup, Plan, SummaryRow
from results_schema.verdicts import NOT_SLOWER, verdict


@dataclass(frozen=True)
class Statistic:
    """The candidate's speedup over the baseline on one config or (config None) their
    geometric mean; for the A/A control, its speedup over its twin. Without an interval (a
    flagged row, no config compared) it has no verdict, and `why` says why."""

    config: str | None
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str | None = None
    why: str = ""

    @property
    def label(self) -> str:
        return "the geometric mean" if self.config is None else self.config

    @property
    def slower(self) -> bool:
        return self.verdict == "slower"

    @property
    def not_slower(self) -> bool:
        return self.verdict in NOT_SLOWER


@dataclass(frozen=True)
class Judged:
    """The gated statistics of a run at one margin, its A/A control and its noise decision."""

    gated: tuple[Statistic, ...]
    control: Statistic | None  # the control's geometric mean; None without one
    has_control: bool
    noisy: bool  # the run's noise decision at the margin

    def slower(self) -> list[Statistic]:
        return [s for s in self.gated if s.slower]

    def undecided(self) -> list[Statistic]:
        return [s for s in self.gated if not (s.slower or s.not_slower)]

    def control_equivalent(self) -> bool:
        return self.control is not None and self.control.verdict == "equivalent"

    def settled(self) -> bool:
        """Whether more samples could no longer change what the gate says: the control
        called the run noisy, a gated statistic is slower, or every one is shown not slower
        and the control (where the plan has one) equivalent."""
        if self.noisy or self.slower():
            return True
        return not self.undecided() and (self.control_equivalent() or not self.has_control)

    def open_labels(self) -> list[str]:
        """What is still undecided, by name: statistics, then the control."""
        labels = [s.label for s in self.undecided()]
        if self.has_control and not self.noisy and not self.control_equivalent():
            labels.append("the A/A control")
        return labels


def judge_statistics(
    plan: Plan,
    summary: Iterable[SummaryRow],
    overall: Sequence[OverallSpeedup],
    noise: Noise | None,
    margin: float,
    gate_on: GateOn,
) -> Judged:
    """The run's gated statistics judged at `margin` (its A/B comparison: plan.comparison)."""
    if plan.comparison is None:
        raise ValueError("a run without an A/B comparison has nothing to gate")
    baseline = plan.comparison.baseline
    gated = [_overall(overall, baseline, margin) or Statistic(None, why="no config compared")]
    if gate_on == "any":
        gated += _configs(plan, list(summary), margin)
    control = _overall(overall, plan.control_identity, margin) if plan.control else None
    return Judged(
        gated=tuple(gated),
        control=control,
        has_control=plan.control is not None,
        noisy=noise is not None and noise.noisy_at(margin),
    )


def _overall(overall: Sequence[OverallSpeedup], identity, margin: float) -> Statistic | None:
    found = next((o for o in overall if o.identity == identity), None)
    if found is None:
        return None
    word = verdict(found.ci_low, found.ci_high, margin)
    return Statistic(None, found.geomean, found.ci_low, found.ci_high, word)


def _configs(plan: Plan, summary: list[SummaryRow], margin: float) -> list[Statistic]:
    """Each config whose candidate and baseline were both timed: judged, or undecided when a
    row of the two was flagged. One not timed (failed, unavailable) is no statistic: the
    gate counts it among the configs not compared."""
    rows = {(r.config, r.implementation): r for r in summary}
    stats = []
    for config in plan.configs:
        b = rows.get((config.name, plan.comparison.baseline))
        c = rows.get((config.name, plan.candidate))
        if b is None or c is None or b.versus != plan.candidate or b.speedup is None:
            continue
        flag = b.flag or c.flag
        if flag:
            stats.append(Statistic(config.name, why=f"flagged {flag}: no interval"))
            continue
        low, high = b.speedup_ci_low, b.speedup_ci_high
        stats.append(Statistic(config.name, b.speedup, low, high, verdict(low, high, margin)))
    return stats
