"""`bench report`'s service: a fetched run's rows, its A/B comparison and profile, and its
plots drawn into <run dir>/report/; optionally where another run disagrees.

The plots are drawn in a private folder beside the run's and swapped in whole; a report
starts over if the folder came to hold other results meanwhile, so the plots show the
results beside them. A report of results whose plots are already there, drawn by the same
code, draws nothing (report/drawn.json says which results and code drew them).
"""

from __future__ import annotations

import errno
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import boundary
from orchestrator.regular_file import read_regular
from orchestrator.report.ab import ABResults, ab_results
from orchestrator.report.compare import (
    MIN_RELATIVE_DIFFERENCE,
    Disagreement,
    candidate_mismatch,
    compare_runs,
)
from orchestrator.report.load import (
    SNAPSHOT_ATTEMPTS,
    RunResults,
    kept_changing,
    names_every_result_file,
    read_snapshot,
    results_of,
)
from orchestrator.report.plots import PLOT_NAMES, drawing_identity, plot_all, plot_note
from orchestrator.report.telemetry import RoundTelemetry
from results_schema import EnvironmentFingerprint, IntervalMethod, ProfileRow, SummaryRow
from results_schema.kernel_contract import build_failure_lines, failed_builds
from results_schema.models import Noise
from results_schema.ranking import Ranking

REPORT_SUBDIR = boundary.REPORT_SUBDIR
# In report/: the results and the drawing code its plots were drawn from, and their names.
DRAWN_STAMP = "drawn.json"
MAX_STAMP_BYTES = 4096


@dataclass(frozen=True)
class ReportRow:
    config: str
    implementation: str
    backend: str
    mode: str
    median_ms: float
    tflops: float
    pct_of_peak: float | None
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    verdict: str | None
    versus: str | None = None
    flag: str | None = None
    # The row's median over its `versus` row's median. `speedup` is the median of the paired
    # per-round ratios instead, which cancels what a round's two samples share (drift, a
    # busy neighbour); the ratio of medians does not, so the two can differ.
    ratio_of_medians: float | None = None


@dataclass
class Report:
    run_id: str
    status: str
    rows: list[ReportRow]
    plots: list[Path] = field(default_factory=list)
    compared_with: str | None = None
    disagreements: list[Disagreement] = field(default_factory=list)
    statistics: IntervalMethod | None = None  # how intervals and verdicts were made
    control: str | None = None  # the A/A control's identity
    ab: ABResults | None = None  # the A/B comparison the report leads with
    profile: list[ProfileRow] = field(default_factory=list)
    candidate: str | None = None  # the plan's candidate, when the plan is known
    # A user's kernel as the candidate: its tree, '<commit>[+dirty]' or 'tree-<sha256>'
    candidate_source: str | None = None
    plot_note: str | None = None  # what the plots leave out (the table has every row)
    # '<kernel>: build failed: <its last line>' per user kernel whose build failed (VM text)
    build_failures: list[str] = field(default_factory=list)
    # '<config> <identity>: FAILED <stage>: <reason>' (or unavailable) for each (config,
    # identity) that failed a check: why the table has no timing of it, or flags it (VM text)
    check_failures: list[str] = field(default_factory=list)
    noise: Noise | None = None  # the A/A control's one decision on the run
    compare_warning: str | None = None  # why --compare's two runs are not like for like
    margin: float | None = None  # the margin every verdict shown was made at
    telemetry: list[RoundTelemetry] = field(default_factory=list)  # the GPU, round by round
    environment: EnvironmentFingerprint | None = None  # what it ran on: cuDNN, clock ceilings
    ranking: Ranking | None = None  # the candidates ranked (ranking.json), led with if several

    @property
    def confidence(self) -> float | None:
        """The intervals' confidence (a sampled run's last look's); None: not recorded."""
        return self.statistics.confidence if self.statistics else None

    def control_verdicts(self) -> dict[str, int]:
        """How many configs the A/A control called each verdict: the run's noise floor."""
        counts: dict[str, int] = defaultdict(int)
        for row in self.rows:
            if row.implementation == self.control and row.verdict:
                counts[row.verdict] += 1
        return dict(counts)


def make_report(
    results_dir: Path,
    compare_dir: Path | None = None,
    min_relative_difference: float = MIN_RELATIVE_DIFFERENCE,
    margin: float | None = None,
) -> Report:
    """The report of one published copy of the run, its plots swapped into report/ whole;
    drawn again when a fetch brought other results meanwhile, so they show the results
    beside them. Its verdicts are the one rule's at `margin` (None: the run's own)."""
    for _ in range(SNAPSHOT_ATTEMPTS):
        run, results = read_snapshot(results_dir)
        plots = _draw_and_publish(run, results_dir, results)
        if plots is not None:
            break
    else:
        raise kept_changing(results_dir)
    report = _report_of(run if margin is None else run.judged_at(margin))
    report.plots = plots
    if compare_dir is not None:
        other, _ = read_snapshot(compare_dir)
        report.compared_with = other.run_id
        report.disagreements = compare_runs(run, other, min_relative_difference)
        report.compare_warning = candidate_mismatch(run, other)
    return report


def _report_of(run: RunResults) -> Report:
    medians = {(s.config, s.implementation): s.median_ms for s in run.summary}
    report = Report(run.run_id, run.status, [_row(s, medians) for s in run.summary])
    report.statistics = run.statistics
    report.control = run.plan.control_identity if run.plan else None
    report.ab = ab_results(run)
    report.profile = run.profile
    report.candidate = run.plan.candidate if run.plan else None
    kernel = run.plan.user_kernel(run.plan.candidate) if run.plan else None
    report.candidate_source = kernel.source.label() if kernel else None
    report.plot_note = plot_note(run)
    report.build_failures = build_failures(run)
    built = failed_builds(run.manifest.user_builds) if run.manifest else set()
    report.check_failures = [  # a failed build has its one line already
        check.failure_line()
        for check in run.failed_checks().values()
        if check.implementation not in built
    ]
    report.noise = run.manifest.noise if run.manifest else None
    report.margin = run.margin
    report.telemetry = run.telemetry
    report.environment = run.manifest.environment if run.manifest else None
    report.ranking = run.manifest.ranking if run.manifest else None
    return report


def build_failures(run: RunResults) -> list[str]:
    """Why a user's kernel has no rows: its build failed (the manifest says how)."""
    if run.manifest is None or run.plan is None:
        return []
    return build_failure_lines(run.manifest.user_builds, run.plan.identities)


def _row(s: SummaryRow, medians: dict[tuple[str, str], float]) -> ReportRow:
    ci = (s.speedup_ci_low, s.speedup_ci_high) if s.speedup_ci_low is not None else None
    versus_median = medians.get((s.config, s.versus)) if s.speedup is not None else None
    return ReportRow(
        s.config,
        s.implementation,
        s.backend,
        s.mode,
        s.median_ms,
        s.tflops,
        s.pct_of_peak,
        s.speedup,
        ci,
        s.verdict,
        s.versus,
        s.flag,
        s.median_ms / versus_median if versus_median else None,
    )


def _draw_and_publish(run: RunResults, run_dir: Path, results: str) -> list[Path] | None:
    """Draw the plots in a private folder beside the run's (a fetch replaces the run's
    folder whole), then swap them in as its report/; None when the folder no longer holds
    the results drawn, or was between a fetch's renames when the plots went in. Plots
    already there from these results and this code are kept as they are."""
    kept = _plots_drawn_already(run_dir, results)
    if kept is not None:
        return kept
    parent = run_dir.parent
    boundary.remove_abandoned(parent, boundary.DRAFT_REPORT_PREFIX)
    with boundary.private_dir(parent, f"{boundary.DRAFT_REPORT_PREFIX}{run_dir.name}-") as draft:
        drawn = draft / REPORT_SUBDIR
        drawn.mkdir()
        names = [plot.name for plot in plot_all(run, drawn)]
        (drawn / DRAWN_STAMP).write_bytes(_stamp(results, names))
        if results_of(run_dir) != results or not _swap_in(drawn, run_dir / REPORT_SUBDIR, draft):
            return None
    if results_of(run_dir) != results:
        return None
    return [run_dir / REPORT_SUBDIR / name for name in names]


def _stamp(results: str, names: list[str]) -> bytes:
    return json.dumps({"results": results, "drawn_by": drawing_identity(), "plots": names}).encode()


def _plots_drawn_already(run_dir: Path, results: str) -> list[Path] | None:
    """report/'s plots when a report drew them from these results with this code (a report
    of a run already reported: 1-5 s of CPU saved), else None. Only results a manifest
    names file by file qualify. The stamp is read without following a link and only up to
    a few KB; each plot it names must be one of ours and a regular file there."""
    report = run_dir / REPORT_SUBDIR
    if not names_every_result_file(results) or report.is_symlink() or not report.is_dir():
        return None
    try:
        stamp = read_regular(report / DRAWN_STAMP, MAX_STAMP_BYTES)
    except OSError:
        return None
    names = _stamped_plots(stamp, results)
    if names is None:
        return None
    plots = [report / name for name in names]
    if any(plot.is_symlink() or not plot.is_file() for plot in plots):
        return None
    return plots


def _stamped_plots(stamp: bytes, results: str) -> list[str] | None:
    """The plot names a stamp lists when it is this results' and this code's, else None."""
    if len(stamp) > MAX_STAMP_BYTES:
        return None
    try:
        fields = json.loads(stamp)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("results") != results:
        return None
    names = fields.get("plots")
    if fields.get("drawn_by") != drawing_identity() or not isinstance(names, list):
        return None
    # Names first: a set of what is not a known name could meet an unhashable JSON value.
    if not all(name in PLOT_NAMES for name in names) or len(set(names)) != len(names):
        return None
    return names


def _swap_in(drawn: Path, target: Path, draft: Path) -> bool:
    """The earlier plots (or a link planted there, never followed) go aside into the draft
    folder, removed after; the new ones take their place. False when the run's folder was
    missing (a fetch between its renames). A fetch may carry an earlier report/ into a new
    copy meanwhile: that one goes aside too."""
    for attempt in range(3):
        try:
            target.rename(draft / f"replaced-{attempt}")
        except FileNotFoundError:
            pass  # no earlier report, or no run folder (the next rename tells)
        try:
            drawn.rename(target)
            return True
        except FileNotFoundError:
            return False
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    return False
