"""`bench report`: a table and plots from a fetched run, optionally checked against another.

Reads <run dir>/manifest.json (optional: partial runs have one the startup script wrote,
local runs may not) and <run dir>/results/*.csv; writes PNGs to <run dir>/report/.
Controller side: numpy and matplotlib (imported lazily, Agg backend), never torch.

A fetch may republish the run while a report reads it: the report reads one published copy
(read_snapshot), draws in a private folder beside it and swaps the plots in, and starts
over if the folder came to hold other results meanwhile. What a run holds never sets how
long drawing takes or how large an image grows: a figure shows at most MAX_PLOTTED_CONFIGS
configs and MAX_PLOTTED_IMPLEMENTATIONS implementations and is at most MAX_FIGURE_INCHES at
PLOT_DPI.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import re
import stat
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator import boundary
from orchestrator.errors import NotFoundError, ResultsError, UsageError
from results_schema import (
    Comparison,
    IntervalMethod,
    KernelBuild,
    Manifest,
    OverallSpeedup,
    Plan,
    ProfileRow,
    SummaryRow,
)
from results_schema.intervals import bootstrap_median_ci
from results_schema.kernel_contract import build_failure_lines
from results_schema.models import Noise, implementation_of
from results_schema.names import RUN_ID_PATTERN

REPORT_SUBDIR = boundary.REPORT_SUBDIR
# 1,200 configs once took 695 s to draw into a 1848 × 112288 px PNG. A figure now shows the
# first configs and implementations in the run's order (the table lists every row), and is
# never larger than MAX_FIGURE_INCHES: at PLOT_DPI, 2200 × 3300 px.
MAX_PLOTTED_CONFIGS = 24  # the default plan's 12, twice over
MAX_PLOTTED_IMPLEMENTATIONS = 8  # an A/B plan with its A/A control times 5
MAX_FIGURE_INCHES = (20.0, 30.0)  # width, height
PLOT_DPI = 110
# fetch swaps a run's folder in by two renames: a read that meets the instant between, or
# that spans a swap, is made again after a pause growing by this much, this many times.
SNAPSHOT_ATTEMPTS = 8
SNAPSHOT_PAUSE_SECONDS = 0.05
# Intervals from 50 samples are often narrower than run-to-run variation (measured on an
# H100: back-to-back medians moved up to 1.8%, with non-overlapping intervals), so a
# disagreement also needs the point estimates this far apart to be worth a flag.
MIN_RELATIVE_DIFFERENCE = 0.02


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


@dataclass(frozen=True)
class Disagreement:
    """A (config, implementation) whose interval in this run misses the other run's."""

    config: str
    implementation: str
    quantity: str  # "speedup" or "median_ms"
    this: tuple[float, float]
    other: tuple[float, float]
    relative_difference: float  # (this - other) / other, of the point estimates


@dataclass(frozen=True)
class ABRow:
    """One config of the A/B comparison: the candidate's speedup over the baseline."""

    config: str
    candidate_ms: float | None
    baseline_ms: float
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    verdict: str | None


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
    noise: Noise | None = None  # the A/A control's one decision on the run
    compare_warning: str | None = None  # why --compare's two runs are not like for like

    def control_verdicts(self) -> dict[str, int]:
        """How many configs the A/A control called each verdict: the run's noise floor."""
        counts: dict[str, int] = defaultdict(int)
        for row in self.rows:
            if row.implementation == self.control and row.verdict:
                counts[row.verdict] += 1
        return dict(counts)


@dataclass
class RunResults:
    run_id: str
    status: str
    plan: Plan | None
    summary: list[SummaryRow]
    latencies: dict[tuple[str, str], np.ndarray]  # (config, implementation) -> ms per call
    statistics: IntervalMethod | None = None
    manifest: Manifest | None = None
    profile: list[ProfileRow] = field(default_factory=list)
    plot_note: str | None = None  # set on the part of a run the plots show: what they omit


def make_report(
    results_dir: Path,
    compare_dir: Path | None = None,
    min_relative_difference: float = MIN_RELATIVE_DIFFERENCE,
) -> Report:
    """The report of one published copy of the run, its plots swapped into report/ whole;
    drawn again when a fetch brought other results meanwhile, so they show the results
    beside them."""
    for _ in range(SNAPSHOT_ATTEMPTS):
        run, results = read_snapshot(results_dir)
        plots = _draw_and_publish(run, results_dir, results)
        if plots is not None:
            break
    else:
        raise _kept_changing(results_dir)
    report = _report_of(run)
    report.plots = plots
    if compare_dir is not None:
        other, _ = read_snapshot(compare_dir)
        report.compared_with = other.run_id
        report.disagreements = compare_runs(run, other, min_relative_difference)
        report.compare_warning = candidate_mismatch(run, other)
    return report


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


def _report_of(run: RunResults) -> Report:
    report = Report(run.run_id, run.status, [_row(s) for s in run.summary])
    report.statistics = run.statistics
    report.control = run.plan.control_identity if run.plan else None
    report.ab = ab_results(run)
    report.profile = run.profile
    report.candidate = run.plan.candidate if run.plan else None
    kernel = run.plan.user_kernel(run.plan.candidate) if run.plan else None
    report.candidate_source = kernel.source.label() if kernel else None
    report.plot_note = plot_note(run)
    report.build_failures = build_failures(run)
    report.noise = run.manifest.noise if run.manifest else None
    return report


def build_failures(run: RunResults) -> list[str]:
    """Why a user's kernel has no rows: its build failed (the manifest says how)."""
    if run.manifest is None or run.plan is None:
        return []
    return build_failure_lines(run.manifest.user_builds, run.plan.identities)


# --- which folder, which copy ------------------------------------------------------------


def published_run_dir(dest: Path, run: str) -> Path:
    """The folder `bench report RUN` reads and writes report/ into: DEST/<run id>/, or the
    path of a run folder fetch published (named by its run id, not a link; load_run holds
    it to that run's manifest). Any other path is refused (exit 2): report would write
    into whatever folder it was given."""
    if re.fullmatch(RUN_ID_PATTERN, run):
        return dest / run
    path = Path(run)
    if not re.fullmatch(RUN_ID_PATTERN, path.name):
        raise UsageError(
            f"{boundary.printable(run, 120)!r} is not a run: give a run id (the report reads "
            "DEST/<run id>/, --dest names DEST) or the path of a folder `bench fetch` wrote"
        )
    if path.is_symlink():
        raise UsageError(f"{boundary.printable(run, 120)!r} is a link: give the run's folder")
    return path


def read_snapshot(run_dir: Path) -> tuple[RunResults, str]:
    """The run as one published copy of its folder holds it, and which results those were
    (`_results_of`). fetch swaps a run's folder in by two renames, so a read may meet the
    instant between (no folder) or span two copies: it is made again until the folder
    holds the same results before and after."""
    for attempt in range(SNAPSHOT_ATTEMPTS):
        before = _results_of(run_dir)
        if before is None and not _being_published(run_dir):
            raise NotFoundError(
                f"{boundary.printable(run_dir)} holds no fetched run; run "
                f"`bench fetch {boundary.printable(run_dir.name)}` first"
            )
        if before is not None:
            run = _read_copy(run_dir, before)
            if run is not None:
                return run, before
        time.sleep(SNAPSHOT_PAUSE_SECONDS * (attempt + 1))
    raise _kept_changing(run_dir)


def _read_copy(run_dir: Path, results: str) -> RunResults | None:
    """load_run, or None when the folder stopped holding those results while it was read."""
    try:
        run = load_run(run_dir)
    except (OSError, ResultsError) as error:
        if _results_of(run_dir) != results:
            return None
        if isinstance(error, OSError):
            raise ResultsError(f"cannot read {boundary.printable(run_dir)}: {error}") from None
        raise
    return run if _results_of(run_dir) == results else None


def _results_of(run_dir: Path) -> str | None:
    """Which results the folder holds now: its manifest's sha256 (the manifest holds every
    result file's), so a fetch that republished the same run changes nothing; for a folder
    without one, which folder it is. None when there is none."""
    try:
        st = os.stat(run_dir)
        if not stat.S_ISDIR(st.st_mode):
            return None
        manifest = run_dir / "manifest.json"
        if manifest.is_symlink() or not manifest.is_file():
            return f"folder {st.st_dev}:{st.st_ino}"
        with open(manifest, "rb") as f:
            return hashlib.sha256(f.read(boundary.LIMITS.manifest_bytes + 1)).hexdigest()
    except OSError:
        return None


def _being_published(run_dir: Path) -> bool:
    """Whether a fetch is between its two renames: the old copy is aside, the new not in."""
    return run_dir.with_name(f".{run_dir.name}.old").exists()


def _kept_changing(run_dir: Path) -> ResultsError:
    return ResultsError(
        f"{boundary.printable(run_dir)} held other results at every one of "
        f"{SNAPSHOT_ATTEMPTS} reads: a fetch keeps replacing them; report again once it ends"
    )


def _draw_and_publish(run: RunResults, run_dir: Path, results: str) -> list[Path] | None:
    """Draw the plots in a private folder beside the run's (a fetch replaces the run's
    folder whole), then swap them in as its report/; None when the folder no longer holds
    the results drawn, or was between a fetch's renames when the plots went in."""
    parent = run_dir.parent
    boundary.remove_abandoned(parent, boundary.DRAFT_REPORT_PREFIX)
    with boundary.private_dir(parent, f"{boundary.DRAFT_REPORT_PREFIX}{run_dir.name}-") as draft:
        drawn = draft / REPORT_SUBDIR
        drawn.mkdir()
        names = [plot.name for plot in _plot_all(run, drawn)]
        if _results_of(run_dir) != results or not _swap_in(drawn, run_dir / REPORT_SUBDIR, draft):
            return None
    if _results_of(run_dir) != results:
        return None
    return [run_dir / REPORT_SUBDIR / name for name in names]


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


# --- reading -----------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunResults:
    """A run folder's results through the same boundary as fetch (a folder may have been
    copied from anywhere). One named by a run id holds that run's manifest."""
    manifest = _manifest_of(run_dir)
    results = run_dir / "results"
    summary_path, measurements_path = results / "summary.csv", results / "measurements.csv"
    if not summary_path.is_file() or not measurements_path.is_file():
        if manifest is not None and manifest.status != "complete":
            # A fetched run that ended before timing: say why, not "fetch it first".
            raise ResultsError(
                f"run {manifest.run_id} {manifest.status}: "
                f"{manifest.reason or 'no reason recorded'}; it has no "
                "measurements to report (`bench logs RUN` shows its log)"
            )
        raise ResultsError(
            f"{run_dir} has no results/summary.csv and results/measurements.csv: "
            "fetch the run first, or point at the directory that holds manifest.json"
        )
    plan = manifest.plan if manifest and manifest.plan else _plan_file(run_dir)
    run_id = manifest.run_id if manifest else None
    summary = list(boundary.checked_rows(summary_path, "summary.csv", run_id, plan=plan))
    run_id = run_id or (summary[0].run_id if summary else None)
    latencies = _latencies(
        boundary.checked_rows(measurements_path, "measurements.csv", run_id, plan=plan)
    )
    status = manifest.status if manifest else "no manifest"
    statistics = manifest.statistics if manifest else None
    profile_path = results / "profile.csv"
    profile = (
        list(boundary.checked_rows(profile_path, "profile.csv", run_id, plan=plan))
        if profile_path.is_file()
        else []
    )
    return RunResults(
        run_id or run_dir.name, status, plan, summary, latencies, statistics, manifest, profile
    )


def _manifest_of(run_dir: Path) -> Manifest | None:
    manifest = boundary.fetched_manifest(run_dir)
    if not re.fullmatch(RUN_ID_PATTERN, run_dir.name):
        return manifest
    if manifest is None:
        raise NotFoundError(
            f"{run_dir} holds no fetched run; run `bench fetch {run_dir.name}` first"
        )
    if manifest.run_id != run_dir.name:
        raise ResultsError(
            f"{run_dir} holds run {boundary.printable(manifest.run_id, 40)}, not {run_dir.name}"
        )
    return manifest


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


def _plan_file(run_dir: Path) -> Plan | None:
    path = run_dir / "plan.json"
    if not path.is_file():
        return None
    try:
        data = boundary.parse_json(path.read_bytes(), boundary.LIMITS.manifest_bytes)
        plan = Plan.model_validate(data)
    except ValueError as exc:
        raise ResultsError(f"{path} is not a valid plan: {boundary.printable(exc)}") from None
    if len(plan.configs) > boundary.LIMITS.configs:
        raise ResultsError(f"{path}: {len(plan.configs)} configs (most {boundary.LIMITS.configs})")
    return plan


def _row(s: SummaryRow) -> ReportRow:
    ci = (s.speedup_ci_low, s.speedup_ci_high) if s.speedup_ci_low is not None else None
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
    )


def implementation_label(implementation: str, backends: Iterable[str]) -> str:
    """An implementation with the backend that actually ran, e.g. "sdpa (cudnn)"; where
    configs ran different backends, each: "sdpa (cudnn/flash)"."""
    details = sorted({_backend_detail(implementation, b) for b in backends} - {""})
    return f"{implementation} ({'/'.join(details)})" if details else implementation


def _backend_detail(implementation: str, backend: str) -> str:
    """What the backend adds to the name: SDPA's chosen kernel, the flash kernel's path
    (its unit name repeats the config: head dim, dtype, causal), a user's kernel's tree
    (its commit, '+dirty'), nothing for a pinned SDPA whose name says it."""
    family, _, detail = backend.partition(":")
    if not detail:
        return "" if backend == implementation else backend
    if family == "user":  # user:<declared name>@<commit 12>[+dirty] (benches/user_kernel.py)
        return detail.rpartition("@")[2]
    if family == "flash":
        unit, _, arch = detail.rpartition(":")
        return f"sm90 path on {arch}" if unit.endswith("_sm90") else f"sm80 path on {arch}"
    if implementation_of(implementation) == f"{family}-{detail}":
        return ""
    return detail


# --- comparing two runs ------------------------------------------------------------------


def _disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def _latencies(measurements) -> dict[tuple[str, str], np.ndarray]:
    """Only what the comparison and plots use: a float per sample, not a model per row."""
    grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
    for m in measurements:
        grouped[(m.config, m.implementation)].append(m.latency_ms)
    return {k: np.asarray(v) for k, v in grouped.items()}


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


# --- plots -------------------------------------------------------------------------------


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    # Config and implementation names come from a run: "$...$" in one must stay text, not
    # mathtext that fails to parse.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def _plot_all(run: RunResults, out_dir: Path) -> list[Path]:
    if not run.summary:
        return []
    plt = load_pyplot()
    run = plotted_part(run)
    plots = [_save(plt, _latency_figure(plt, run), out_dir / "latency.png")]
    if any(s.speedup is not None for s in run.summary):
        plots.append(_save(plt, _speedup_figure(plt, run), out_dir / "speedup.png"))
    if run.plan is not None:
        plots.append(_save(plt, _tflops_figure(plt, run), out_dir / "tflops.png"))
    return plots


def plotted_part(run: RunResults) -> RunResults:
    """The run as its plots show it: the first MAX_PLOTTED_CONFIGS configs and
    MAX_PLOTTED_IMPLEMENTATIONS implementations, in the run's order, and a note of the rest."""
    configs = set(_config_order(run)[:MAX_PLOTTED_CONFIGS])
    implementations = set(_implementations(run)[:MAX_PLOTTED_IMPLEMENTATIONS])

    def shown(config: str, implementation: str) -> bool:
        return config in configs and implementation in implementations

    return dataclasses.replace(
        run,
        summary=[s for s in run.summary if shown(s.config, s.implementation)],
        latencies={key: value for key, value in run.latencies.items() if shown(*key)},
        plot_note=plot_note(run),
    )


def plot_note(run: RunResults) -> str | None:
    """What the plots leave out of the run, or None when they show all of it."""
    omitted = [
        f"the first {most} of {count} {what}"
        for what, count, most in (
            ("configs", len(_config_order(run)), MAX_PLOTTED_CONFIGS),
            ("implementations", len(_implementations(run)), MAX_PLOTTED_IMPLEMENTATIONS),
        )
        if count > most
    ]
    return f"plots show {' and '.join(omitted)}; the table has every row" if omitted else None


def figure_size(width: float, height: float) -> tuple[float, float]:
    """Inches as a figure's content asks, within MAX_FIGURE_INCHES whatever the run holds."""
    return min(width, MAX_FIGURE_INCHES[0]), min(height, MAX_FIGURE_INCHES[1])


def plot_label(name: str) -> str:
    """A name from the run, as plot text: control characters escaped (and reported by no
    missing-glyph warning on the terminal)."""
    return boundary.printable(name, max_chars=80)


def _labels(names: list[str]) -> list[str]:
    return [plot_label(name) for name in names]


def _config_order(run: RunResults) -> list[str]:
    return list(dict.fromkeys(s.config for s in run.summary))


def _implementations(run: RunResults) -> list[str]:
    return list(dict.fromkeys(s.implementation for s in run.summary))


def _implementation_labels(run: RunResults) -> dict[str, str]:
    """Each implementation as the plots name it: with the backends it ran, escaped."""
    backends: dict[str, list[str]] = defaultdict(list)
    for s in run.summary:
        backends[s.implementation].append(s.backend)
    return {impl: plot_label(implementation_label(impl, b)) for impl, b in backends.items()}


def _title(fig, what: str, run: RunResults) -> None:
    """The plot's title names the run and the candidate; wrapped to the figure's width
    (a one-panel figure is narrow), never clipped."""
    labels = _implementation_labels(run)
    candidate = run.plan.candidate if run.plan else None
    text = f"{what}, run {plot_label(run.run_id)} ({plot_label(run.status)})"
    if candidate:
        text += f"; candidate {labels.get(candidate, plot_label(candidate))}"
    if run.plot_note:
        text += f" ({run.plot_note})"
    fig.suptitle(text, wrap=True, fontsize=11)


def _save(plt, fig, path: Path) -> Path:
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
    return path


def _latency_figure(plt, run: RunResults):
    """One panel per config: each implementation's sample distribution."""
    configs, impls, lat = _config_order(run), _implementations(run), run.latencies
    names = _implementation_labels(run)
    cols = min(4, len(configs))
    rows = -(-len(configs) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=figure_size(max(4.2 * cols, 7.0), 3.4 * rows + 0.8),
        squeeze=False,
        layout="constrained",
    )
    for ax, config in zip(axes.flat, configs, strict=False):
        present = [i for i in impls if (config, i) in lat]
        if not present:  # a summary row whose samples measurements.csv lacks
            _no_samples(ax, config)
            continue
        ax.boxplot([lat[(config, i)] for i in present], showfliers=True)
        # Names wrapped under their box (a panel is ~4 in wide), not rotated into the next.
        ax.set_xticks(
            range(1, len(present) + 1),
            [textwrap.fill(names[i], 14) for i in present],
            fontsize=7,
        )
        ax.set_title(textwrap.fill(plot_label(config), 48), fontsize=9)
        ax.set_ylabel("ms per call", fontsize=8)
        values = np.concatenate([lat[(config, i)] for i in present])
        if values.min() > 0 and values.max() / values.min() > 20:
            ax.set_yscale("log")  # outliers would flatten the boxes
            plain_tick_labels(ax.yaxis)
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[len(configs) :]:
        ax.remove()  # no empty frame where the grid has more cells than configs
    _title(fig, "Latency per sample", run)
    return fig


def _no_samples(ax, config: str) -> None:
    ax.set_title(textwrap.fill(plot_label(config), 48), fontsize=9)
    ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _width_for(configs: list[str]) -> float:
    """Inches for a plot with config names along its y axis: 8, plus room for long names
    (about 0.07 in per character at the tick font size) so the axes keep their width."""
    longest = max((len(plot_label(c)) for c in configs), default=0)
    return 8.0 + max(longest - 24, 0) * 0.07


def plain_tick_labels(axis) -> None:
    """Log-axis ticks as plain numbers: the default labels are mathtext, which the
    `text.parse_math = False` that keeps run names literal would print as source."""
    from matplotlib import ticker

    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _speedup_figure(plt, run: RunResults):
    """The candidate's speedup over each baseline with its 95% interval, per config."""
    configs = _config_order(run)
    names = _implementation_labels(run)
    baselines = list(dict.fromkeys(s.implementation for s in run.summary if s.speedup is not None))
    fig, ax = plt.subplots(
        figsize=figure_size(_width_for(configs), 0.3 * len(configs) * max(len(baselines), 1) + 2.0),
        layout="constrained",
    )
    height = 0.8 / max(len(baselines), 1)
    for b_index, baseline in enumerate(baselines):
        rows = {s.config: s for s in run.summary if s.implementation == baseline and s.speedup}
        ys = [i + b_index * height for i, c in enumerate(configs) if c in rows]
        points = [rows[c] for c in configs if c in rows]
        # A bootstrap interval need not contain its point: draw what lies on each side.
        xerr = [
            [max(p.speedup - p.speedup_ci_low, 0.0) for p in points],
            [max(p.speedup_ci_high - p.speedup, 0.0) for p in points],
        ]
        control = run.plan is not None and baseline == run.plan.control_identity
        ax.errorbar(
            [p.speedup for p in points],
            ys,
            xerr=xerr,
            fmt="s" if control else "o",
            capsize=3,
            # The control's row is its twin against itself, never the candidate's speedup.
            label=_control_label(run, names) if control else f"over {names[baseline]}",
            **({"color": "grey"} if control else {}),
        )
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    bounds = [b for s in run.summary if s.speedup for b in (s.speedup_ci_low, s.speedup_ci_high)]
    if bounds and max(bounds) / min(bounds) > 4:
        ax.set_xscale("log")  # ratios: 0.5x and 2x equally far from 1
        plain_tick_labels(ax.xaxis)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(configs))], _labels(configs), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "speedup of the candidate (median of paired ratios, 95% CI); > 1 is faster; "
        "grey: the A/A control"
    )
    ax.legend(fontsize=8)
    _title(fig, "Speedup", run)
    return fig


def _control_label(run: RunResults, names: dict[str, str]) -> str:
    twin = names.get(run.plan.control) or plot_label(run.plan.control)
    return f"A/A control: {twin} against itself"


def _shape_order(run: RunResults) -> list[str]:
    """Configs grouped by shape: causal apart (half the work), then dtype and head dim,
    then growing sequence length and batch x heads."""
    configs = {c.name: c for c in run.plan.configs}
    measured = [name for name in _config_order(run) if name in configs]

    def shape(name: str):
        c = configs[name]
        return (c.causal, c.dtype, c.head_dim, c.seq_len, c.batch * c.heads)

    return sorted(measured, key=shape)


def _tflops_figure(plt, run: RunResults):
    """TFLOP/s at the median: one bar per (config, implementation), configs grouped by
    shape. Bars, not lines: configs differ in more than sequence length, so a line through
    them would draw a trend that no single shape has."""
    configs, impls = _shape_order(run), _implementations(run)
    names = _implementation_labels(run)
    tflops = {(s.config, s.implementation): s.tflops for s in run.summary}
    bar = 0.8 / len(impls)
    # Tall enough for a bar's label, within MAX_FIGURE_INCHES.
    height = 0.22 * len(configs) * len(impls) + 0.35 * len(configs) + 2.0
    fig, ax = plt.subplots(figsize=figure_size(_width_for(configs), height), layout="constrained")
    for index, impl in enumerate(impls):
        ys = [row + index * bar for row, c in enumerate(configs) if (c, impl) in tflops]
        values = [tflops[(c, impl)] for c in configs if (c, impl) in tflops]
        ax.barh(ys, values, height=bar * 0.9, label=names[impl])
    ax.set_yticks([row + 0.4 - bar / 2 for row in range(len(configs))], _labels(configs))
    ax.tick_params(axis="y", labelsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s at the median (causal configs count half the work)")
    ax.legend(fontsize=8, loc="best")
    _title(fig, "Throughput", run)
    return fig
