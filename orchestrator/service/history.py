"""`bench history`: one kernel's per-config medians on one GPU type across fetched runs,
in commit order, so that a slow drift across many small pull requests shows.

Each run is read through `report.read_snapshot` (the boundary's checks, one published copy
of the folder), never from its files directly. A run is placed by the commit its candidate
was built from (`Plan.candidate_tree`: our kernels/ tree as launch read it, or a user's
kernel tree) in `git rev-list --topo-order` of the repository at hand; without one, or for
a commit that repository does not hold, by its run id, which is its launch time (UTC).
"""

from __future__ import annotations

import os
import re
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import boundary
from orchestrator.errors import BenchError, UsageError
from orchestrator.kernel_tree.git import run_git
from orchestrator.report import (
    MAX_PLOTTED_CONFIGS,
    PLOT_DPI,
    RunResults,
    figure_size,
    load_pyplot,
    plain_tick_labels,
    plot_label,
    read_snapshot,
)
from orchestrator.spec import is_sweep_id
from results_schema.intervals import bootstrap_median_ci
from results_schema.names import RUN_ID_PATTERN

# The newest runs shown, in the table and the plot: a drift shows over tens of pull
# requests, and what a run folder holds must not set how long the table grows.
MAX_HISTORY_RUNS = 60
# Commits read from `git rev-list`: enough history for any run a results folder holds,
# bounded so a huge repository costs a bounded read.
MAX_ORDERED_COMMITS = 200_000
HISTORY_PNG = "history.png"
NO_GPU = "cpu"  # the GPU name of a run that had none


@dataclass(frozen=True)
class HistoryPoint:
    """The candidate's median in one config of one run, with its 95% bootstrap interval."""

    median_ms: float
    interval: tuple[float, float] | None  # None when measurements.csv lacks its samples


@dataclass(frozen=True)
class HistoryRun:
    run_id: str
    status: str
    kernel: str  # the plan's candidate: our implementation or a user's declared name
    gpu: str
    commit: str | None
    source: str  # '<commit 12>[+dirty]', 'tree-<sha 12>', or '-' when the run kept none
    points: dict[str, HistoryPoint]  # config -> the candidate's median
    plan: str = "-"  # the plan's name: runs of different plans never share a table
    noisy: bool = False  # its A/A control found the machine too noisy for its verdicts


@dataclass(frozen=True)
class SkippedRun:
    name: str  # the folder's name, as found: print it escaped
    reason: str


@dataclass
class History:
    kernel: str
    gpu: str
    runs: list[HistoryRun]  # oldest first
    order: str  # "commit" or "run time"
    # Runs whose commit the repository at hand lacks: after the ordered ones, by run time.
    not_in_history: int = 0
    omitted: int = 0  # older runs beyond MAX_HISTORY_RUNS
    skipped: list[SkippedRun] = field(default_factory=list)
    png: Path | None = None

    @property
    def configs(self) -> list[str]:
        """Every config any shown run measured, in the order runs first measured them."""
        return list(dict.fromkeys(c for run in self.runs for c in run.points))

    @property
    def plans(self) -> list[str]:
        """The shown runs' plans, in the order they first appear."""
        return list(dict.fromkeys(run.plan for run in self.runs))

    @property
    def tables(self) -> list[tuple[str, str]]:
        """(plan, config) for each table: one plan's runs of one config. Two plans' medians
        of a config of one name are no drift of the kernel (other shapes, samples, flags)."""
        found = [(plan, c) for plan in self.plans for r in self.runs_of(plan) for c in r.points]
        return list(dict.fromkeys(found))

    @property
    def noisy(self) -> int:
        return sum(run.noisy for run in self.runs)

    def runs_of(self, plan: str) -> list[HistoryRun]:
        return [run for run in self.runs if run.plan == plan]

    def change_from_first(self, config: str, run: HistoryRun) -> float | None:
        """The run's median relative to the first shown run of its plan that measured the
        config."""
        first = next((r.points[config] for r in self.runs_of(run.plan) if config in r.points), None)
        point = run.points.get(config)
        if first is None or point is None:
            return None
        return point.median_ms / first.median_ms - 1.0


@dataclass(frozen=True)
class HistoryRequest:
    dest: Path
    kernel: str | None = None
    gpu: str | None = None  # a case-insensitive part of the GPU's name, e.g. 'h100'
    png: Path | None = None  # default: DEST/history.png
    repo: Path | None = None  # the git repository whose commit order places the runs


@dataclass(frozen=True)
class NoHistory:
    """No run to show: no error of any run (exit 0); `message` says it in one line."""

    message: str
    skipped: list[SkippedRun]


def make_history(request: HistoryRequest) -> History | NoHistory:
    """The history of the one (kernel, GPU) the request selects, its PNG written."""
    runs, skipped = read_runs(request.dest)
    groups = sorted({(r.kernel, r.gpu) for r in runs})
    chosen = _choose_group(groups, request.kernel, request.gpu, request.dest)
    if isinstance(chosen, str):
        return NoHistory(chosen, skipped)
    mine = [r for r in runs if (r.kernel, r.gpu) == chosen]
    history = ordered_history(chosen, mine, commit_positions(request.repo))
    history.skipped = skipped
    history.png = request.png or request.dest / HISTORY_PNG
    draw_history(history, history.png)
    return history


# --- reading -----------------------------------------------------------------------------


def read_runs(dest: Path) -> tuple[list[HistoryRun], list[SkippedRun]]:
    """Every published run folder under DEST, and the folders passed over with why. Hidden
    folders (a fetch's staging, a report's draft) and sweeps' report folders are no runs."""
    runs, skipped = [], []
    try:
        entries = sorted(os.scandir(dest), key=lambda e: e.name)
    except FileNotFoundError:
        return [], []
    except OSError as error:
        raise UsageError(f"cannot read {boundary.printable(dest)}: {error.strerror}") from None
    for entry in entries:
        if entry.name.startswith(".") or is_sweep_id(entry.name) or not entry.is_dir():
            continue
        if entry.is_symlink():
            skipped.append(SkippedRun(entry.name, "a link, not a folder fetch wrote"))
        elif not re.fullmatch(RUN_ID_PATTERN, entry.name):
            skipped.append(SkippedRun(entry.name, "not named by a run id"))
        else:
            found = history_run(Path(entry.path))
            (runs if isinstance(found, HistoryRun) else skipped).append(found)
    return runs, skipped


def history_run(run_dir: Path) -> HistoryRun | SkippedRun:
    """One run's candidate medians, or why the run has none to show."""
    try:
        run, _ = read_snapshot(run_dir)
    except BenchError as error:
        return SkippedRun(run_dir.name, str(error))
    if run.plan is None:
        return SkippedRun(run_dir.name, "no plan: which kernel it timed is unknown")
    points = candidate_points(run)
    if not points:
        why = no_timing_reason(run.status, run.manifest.reason if run.manifest else None)
        return SkippedRun(run_dir.name, f"no timing of its candidate {run.plan.candidate} ({why})")
    tree = run.plan.candidate_tree()
    environment = run.manifest.environment if run.manifest else None
    noise = run.manifest.noise if run.manifest else None
    return HistoryRun(
        run_id=run.run_id,
        status=run.status,
        kernel=run.plan.candidate,
        gpu=(environment.gpu_name if environment else None) or NO_GPU,
        commit=tree.commit if tree else None,
        source=tree.label() if tree else "-",
        points=points,
        plan=run.plan.name,
        noisy=noise is not None and noise.verdict == "noisy",
    )


def no_timing_reason(status: str, reason: str | None) -> str:
    """The run's status, with the manifest's reason where it gave one."""
    return f"{status}: {reason}" if reason else status


def candidate_points(run: RunResults) -> dict[str, HistoryPoint]:
    candidate = run.plan.candidate
    points = {}
    for row in run.summary:
        if row.implementation != candidate:
            continue
        samples = run.latencies.get((row.config, candidate))
        interval = bootstrap_median_ci(samples) if samples is not None and samples.size else None
        points[row.config] = HistoryPoint(row.median_ms, interval)
    return points


def _choose_group(
    groups: list[tuple[str, str]], kernel: str | None, gpu: str | None, dest: Path
) -> tuple[str, str] | str:
    """The one (kernel, GPU) the options name, or why there is none to show; several left
    to choose from is a usage error listing them."""
    matching = [
        (k, g)
        for k, g in groups
        if (kernel is None or k == kernel) and (gpu is None or gpu.lower() in g.lower())
    ]
    if len(matching) == 1:
        return matching[0]
    if not groups:
        return f"no fetched runs to show in {dest} (`bench fetch RUN` puts them there)"
    listed = "; ".join(f"--kernel {k} --gpu {g!r}" for k, g in groups)
    if not matching:
        return f"no fetched run in {dest} matches; its runs are of {listed}"
    raise UsageError(f"runs of several kernels or GPUs in {dest}: choose one of {listed}")


# --- ordering ----------------------------------------------------------------------------


def commit_positions(repo: Path | None) -> dict[str, int]:
    """Each commit of the repository's history (every ref's), oldest first: its position in
    `git rev-list --topo-order`, which puts a parent before its children. Empty without a
    repository or without commits."""
    if repo is None:
        return {}
    try:
        listing = run_git(
            repo, "rev-list", "--topo-order", "--reverse", f"--max-count={MAX_ORDERED_COMMITS}",
            "--all",
        )  # fmt: skip
    except UsageError:
        return {}
    return {commit: index for index, commit in enumerate(listing.decode().split())}


def ordered_history(
    group: tuple[str, str], runs: list[HistoryRun], positions: dict[str, int]
) -> History:
    """The runs in commit order where the repository knows their commits (runs of one commit
    by run time), the others after them by run time; the newest MAX_HISTORY_RUNS kept."""
    placed = [r for r in runs if r.commit in positions]
    order = "commit" if placed else "run time"
    ordered = sorted(placed, key=lambda r: (positions[r.commit], r.run_id))
    rest = sorted((r for r in runs if r.commit not in positions), key=lambda r: r.run_id)
    everything = ordered + rest
    shown = everything[-MAX_HISTORY_RUNS:]
    return History(
        kernel=group[0],
        gpu=group[1],
        runs=shown,
        order=order,
        not_in_history=len(rest) if placed else 0,
        omitted=len(everything) - len(shown),
    )


# --- the plot ----------------------------------------------------------------------------


def draw_history(history: History, path: Path) -> None:
    """One panel per config (the first MAX_PLOTTED_CONFIGS): the median and its interval
    per run, left to right in the history's order; written whole (a temporary file renamed),
    within report.py's figure bound."""
    plt = load_pyplot()
    configs = history.tables[:MAX_PLOTTED_CONFIGS]
    cols = 1 if len(configs) < 3 else 2
    rows = -(-len(configs) // cols)
    width = max(7.0, 2.0 + 0.18 * len(history.runs)) * cols
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=figure_size(width, 2.6 * rows + 1.2),
        squeeze=False,
        layout="constrained",
    )
    labels = [plot_label(run.source if run.source != "-" else run.run_id) for run in history.runs]
    for ax, (plan, config) in zip(axes.flat, configs, strict=False):
        title = config if len(history.plans) == 1 else f"plan {plan}: {config}"
        _history_panel(ax, history, plan, config, title, labels)
    for ax in list(axes.flat)[len(configs) :]:
        ax.remove()
    kernel, gpu = plot_label(history.kernel), plot_label(history.gpu)
    title = f"{kernel} on {gpu}: median ms per run, 95% interval"
    title += f", in {history.order} order"
    if len(history.plans) == 1:
        title += f", plan {plot_label(history.plans[0])}"
    if len(history.tables) > len(configs):
        title += f" (the first {len(configs)} of {len(history.tables)} configs)"
    fig.suptitle(title, wrap=True, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, draft = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(draft, dpi=PLOT_DPI)
        os.replace(draft, path)
    finally:
        plt.close(fig)
        if os.path.exists(draft):
            os.unlink(draft)


def _history_panel(ax, history: History, plan: str, config: str, title: str, labels) -> None:
    """One plan's medians of one config, at the runs' places among all shown."""
    xs, medians, below, above = [], [], [], []
    for x, run in enumerate(history.runs):
        point = run.points.get(config) if run.plan == plan else None
        if point is None:
            continue
        low, high = point.interval or (point.median_ms, point.median_ms)
        xs.append(x)
        medians.append(point.median_ms)
        # A bootstrap interval need not contain its point: draw what lies on each side.
        below.append(max(point.median_ms - low, 0.0))
        above.append(max(high - point.median_ms, 0.0))
    ax.errorbar(xs, medians, yerr=[below, above], fmt="o-", capsize=3, markersize=4)
    # Every run's label while they fit, else every k-th: the table names them all.
    step = max(1, -(-len(labels) // 30))
    ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=90, fontsize=6)
    ax.set_title(textwrap.fill(plot_label(title), 60), fontsize=9)
    ax.set_ylabel("ms per call", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    plain_tick_labels(ax.yaxis)
