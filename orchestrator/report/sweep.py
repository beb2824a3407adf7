"""`bench report SWEEP`: the GPU types of one sweep side by side.

Per GPU: the candidate's speedup over the plan's first baseline (the run's own overall
speedup from its manifest: the geometric mean over configs of each config's paired speedup,
with its 95% cluster-bootstrap interval), and the best 16-bit TFLOP/s as a share of that
GPU's peak (its kind's row: results_schema/gpu_kinds.json, `percent_of_peak` as the harness
computes it). Each member is read through the same trust boundary as `bench report`
(report.load.read_snapshot); its correctness rows say why a candidate never ran (`flash:
unsupported on sm_75`). One PNG compares the GPUs (`sweep_figure`; a run's own figures are
plots.py's).

A sweep of several candidates (a kernel's variants) also carries each GPU's own ranking of
them (the run's manifest's), and where those rankings disagree (sweep_rankings.py): each
GPU ranks what it timed, so no number of one GPU is compared with another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import boundary
from orchestrator.boundary import REPORT_SUBDIR
from orchestrator.errors import NotFoundError
from orchestrator.gpus import load_gpu_catalog
from orchestrator.registry import RunRecord
from orchestrator.report.load import read_snapshot
from orchestrator.report.plots import PLOT_DPI
from orchestrator.report.sweep_rankings import disagreements
from results_schema import CorrectnessRow, Manifest
from results_schema.gpu_kinds import SIXTEEN_BIT, percent_of_peak
from results_schema.program_output import RankingDisagreement
from results_schema.ranking import Ranking


@dataclass(frozen=True)
class Speedup:
    baseline: str
    geomean: float
    low: float
    high: float
    configs: int


@dataclass(frozen=True)
class GpuResult:
    gpu: str
    run_id: str
    state: str
    candidate: str = ""
    speedup: Speedup | None = None
    best_tflops: float | None = None
    best_implementation: str = ""
    peak_tflops: float | None = None
    notes: tuple[str, ...] = ()
    ranking: Ranking | None = None

    @property
    def pct_of_peak(self) -> float | None:
        return percent_of_peak(self.best_tflops, self.peak_tflops)


@dataclass
class SweepReport:
    sweep_id: str
    gpus: list[GpuResult]
    plot: Path | None = None
    disagreements: list[RankingDisagreement] = field(default_factory=list)

    def rankings(self) -> list[tuple[str, Ranking]]:
        """(gpu, ranking) of each GPU whose run ranked several candidates."""
        return [(g.gpu, g.ranking) for g in self.gpus if g.ranking and g.ranking.leads_report()]


def make_sweep_report(sweep_id: str, members: list[RunRecord], dest: Path) -> SweepReport:
    peaks = {key: gpu.peak_tflops for key, gpu in load_gpu_catalog().items()}
    results = [_member(record, dest / record.run_id, peaks.get(record.gpu)) for record in members]
    report = SweepReport(sweep_id, results)
    report.disagreements = disagreements(report.rankings())
    out_dir = dest / sweep_id / REPORT_SUBDIR
    if any(r.speedup or r.best_tflops for r in results):
        out_dir.mkdir(parents=True, exist_ok=True)
        report.plot = sweep_figure(report, out_dir / "gpus.png")
    return report


def _member(record: RunRecord, run_dir: Path, peak: float | None) -> GpuResult:
    gpu = record.gpu or record.backend
    if not record.handle:
        return GpuResult(gpu, record.run_id, record.state, notes=("did not start",))
    try:
        run, _ = read_snapshot(run_dir)  # one published copy, as `bench report` reads
    except NotFoundError:
        return GpuResult(
            gpu, record.run_id, record.state, notes=("not fetched: bench fetch the sweep",)
        )
    plan = run.plan
    if plan is None:
        return GpuResult(gpu, run.run_id, run.status, notes=("no plan in the run",))
    dtypes = {c.name: c.dtype for c in plan.configs}
    sixteen = [s for s in run.summary if dtypes.get(s.config) in SIXTEEN_BIT]
    best = max(sixteen, key=lambda s: s.tflops, default=None)
    return GpuResult(
        gpu,
        run.run_id,
        run.status,
        candidate=plan.candidate,
        speedup=_speedup(run.manifest, plan.candidate, plan.compared_with[0]),
        best_tflops=best.tflops if best else None,
        best_implementation=best.implementation if best else "",
        peak_tflops=peak,
        notes=_candidate_notes(run_dir, run.run_id, plan.candidate),
        ranking=run.manifest.ranking if run.manifest else None,
    )


def _speedup(manifest: Manifest | None, candidate: str, baseline: str) -> Speedup | None:
    """The candidate's overall speedup over `baseline` as the run computed it (the
    manifest's comparison: a geometric mean over configs with its cluster-bootstrap
    interval, benches.stats), or None when the run has none."""
    overall = next(
        (
            o
            for o in (manifest.comparison if manifest else None) or []
            if o.identity == baseline and o.versus == candidate
        ),
        None,
    )
    if overall is None:
        return None
    return Speedup(baseline, overall.geomean, overall.ci_low, overall.ci_high, overall.configs)


def _candidate_notes(run_dir: Path, run_id: str, candidate: str) -> tuple[str, ...]:
    """Why the candidate did not run, from its correctness rows (one line per reason)."""
    path = run_dir / "results" / "correctness.csv"
    if not path.is_file():
        return ()
    rows: list[CorrectnessRow] = list(boundary.checked_rows(path, "correctness.csv", run_id))
    reasons = dict.fromkeys(
        r.message for r in rows if r.implementation == candidate and not r.passed and r.message
    )
    return tuple(f"{candidate}: {reason}" for reason in reasons)


def sweep_figure(report: SweepReport, path: Path) -> Path:
    """Left: the candidate's speedup per GPU with its interval; right: % of peak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [boundary.printable(g.gpu) for g in report.gpus]
    with matplotlib.rc_context({"text.parse_math": False}):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        speedups = [g.speedup.geomean if g.speedup else 0.0 for g in report.gpus]
        # A bootstrap interval need not contain its point: draw what lies on each side.
        errors = [
            [
                max(g.speedup.geomean - g.speedup.low, 0.0) if g.speedup else 0.0
                for g in report.gpus
            ],
            [
                max(g.speedup.high - g.speedup.geomean, 0.0) if g.speedup else 0.0
                for g in report.gpus
            ],
        ]
        left.bar(labels, speedups, yerr=errors, capsize=6, color="tab:blue")
        left.axhline(1.0, color="grey", linewidth=1, linestyle="--")
        for x, g in enumerate(report.gpus):
            if g.speedup is None:
                left.text(x, 0.05, "did not run", ha="center", rotation=90, fontsize=8)
        baseline = next((g.speedup.baseline for g in report.gpus if g.speedup), "baseline")
        candidate = next((g.candidate for g in report.gpus if g.candidate), "candidate")
        left.set_title(
            boundary.printable(f"{candidate} speedup over {baseline} (geo-mean, 95% interval)")
        )
        left.set_ylabel("speedup (x)")
        pct = [g.pct_of_peak or 0.0 for g in report.gpus]
        right.bar(labels, pct, color="tab:orange")
        for x, g in enumerate(report.gpus):
            if g.best_implementation:
                right.text(
                    x, pct[x], boundary.printable(g.best_implementation), ha="center", va="bottom"
                )
        right.set_ylim(0, max([*pct, 1.0]) * 1.15)  # room for the labels above the bars
        right.set_title("best 16-bit TFLOP/s, % of the GPU's dense peak")
        right.set_ylabel("% of peak")
        fig.suptitle(boundary.printable(f"sweep {report.sweep_id}"))
        fig.tight_layout()
        fig.savefig(path, dpi=PLOT_DPI)
        plt.close(fig)
    return path
