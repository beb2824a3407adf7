"""The A/B comparison a run leads with: the candidate's speedup over the baseline per config,
and overall (computed on the machine that measured, benches/stats.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.report.load import RunResults
from results_schema import Comparison, KernelBuild, OverallSpeedup


@dataclass(frozen=True)
class ABRow:
    """One config of the A/B comparison: the candidate's speedup over the baseline."""

    config: str
    candidate_ms: float | None
    baseline_ms: float
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    verdict: str | None

    @property
    def ratio_of_medians(self) -> float | None:
        """The baseline's median over the candidate's, beside `speedup`, the median of
        their paired per-round ratios."""
        return self.baseline_ms / self.candidate_ms if self.candidate_ms else None


@dataclass(frozen=True)
class ABResults:
    candidate: str
    comparison: Comparison
    rows: list[ABRow]
    overall: OverallSpeedup | None
    candidate_build: KernelBuild | None
    baseline_build: KernelBuild | None
    # A user's kernel trees by identity: '<commit>[+dirty]' or 'tree-<sha256>' (the plan's).
    user_sources: dict[str, str] = field(default_factory=dict)


def ab_results(run: RunResults) -> ABResults | None:
    """The plan's A/B comparison: its rows and its geometric mean, from the run's summary
    and the manifest's comparison (computed on the machine that measured, stats.py)."""
    plan = run.plan
    if plan is None or plan.comparison is None:
        return None
    baseline = plan.comparison.baseline
    medians = {(r.config, r.implementation): r.median_ms for r in run.summary}
    rows = [
        ABRow(
            r.config,
            medians.get((r.config, plan.candidate)),
            r.median_ms,
            r.speedup,
            (r.speedup_ci_low, r.speedup_ci_high) if r.speedup_ci_low is not None else None,
            r.verdict or r.flag,
        )
        for r in run.summary
        if r.implementation == baseline and r.versus == plan.candidate
    ]
    manifest = run.manifest
    overall = (
        next(
            (o for o in (manifest.comparison or []) if o.identity == baseline),
            None,
        )
        if manifest
        else None
    )
    return ABResults(
        candidate=plan.candidate,
        comparison=plan.comparison,
        rows=rows,
        overall=overall,
        candidate_build=manifest.kernel_build if manifest else None,
        baseline_build=manifest.baseline_build if manifest else None,
        user_sources={k.identity: k.source.label() for k in plan.user_kernels},
    )
