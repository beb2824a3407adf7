"""Reading a fetched run: which folder, one published copy of it, its results through the
trust boundary.

Reads <run dir>/manifest.json (optional: partial runs have one the startup script wrote,
local runs may not) and <run dir>/results/*.csv. A fetch may republish the run while a
report reads it: read_snapshot reads one published copy, again if the folder came to hold
other results meanwhile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator import boundary
from orchestrator.errors import NotFoundError, ResultsError, UsageError
from orchestrator.report.telemetry import RoundCollector, RoundTelemetry
from results_schema import CorrectnessRow, IntervalMethod, Manifest, Plan, ProfileRow, SummaryRow
from results_schema.models import first_failures
from results_schema.names import RUN_ID_PATTERN

# fetch swaps a run's folder in by two renames: a read that meets the instant between, or
# that spans a swap, is made again after a pause growing by this much, this many times.
SNAPSHOT_ATTEMPTS = 8
SNAPSHOT_PAUSE_SECONDS = 0.05


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
    # The GPU's clocks, power and temperature per round (none on the CPU).
    telemetry: list[RoundTelemetry] = field(default_factory=list)
    # The correctness gate's rows and the checks on outputs of the timed loop.
    checks: list[CorrectnessRow] = field(default_factory=list)
    margin: float | None = None  # the margin its verdicts were made at, here

    def judged_at(self, margin: float) -> RunResults:
        """The run with every verdict made again from its interval by the one rule
        (results_schema/verdicts.py) at `margin`: what a report, a gate and a summary show,
        whatever words the run wrote (a run from before the rule, a VM that lied)."""
        manifest = self.manifest
        if manifest is not None and manifest.comparison:
            judged = [line.judged_at(margin) for line in manifest.comparison]
            manifest = manifest.model_copy(update={"comparison": judged})
        summary = [row.judged_at(margin) for row in self.summary]
        return dataclasses.replace(self, summary=summary, manifest=manifest, margin=margin)

    def failed_checks(self) -> dict[tuple[str, str], CorrectnessRow]:
        """(config, identity) -> its first failed check, for each that failed one."""
        return first_failures(self.checks)


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
    (`results_of`). fetch swaps a run's folder in by two renames, so a read may meet the
    instant between (no folder) or span two copies: it is made again until the folder
    holds the same results before and after."""
    for attempt in range(SNAPSHOT_ATTEMPTS):
        before = results_of(run_dir)
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
    raise kept_changing(run_dir)


def _read_copy(run_dir: Path, results: str) -> RunResults | None:
    """load_run, or None when the folder stopped holding those results while it was read."""
    try:
        run = load_run(run_dir)
    except (OSError, ResultsError) as error:
        if results_of(run_dir) != results:
            return None
        if isinstance(error, OSError):
            raise ResultsError(f"cannot read {boundary.printable(run_dir)}: {error}") from None
        raise
    return run if results_of(run_dir) == results else None


_FOLDER_RESULTS = "folder "  # results_of for a folder without a manifest: which folder


def results_of(run_dir: Path) -> str | None:
    """Which results the folder holds now: its manifest's sha256 (the manifest holds every
    result file's), so a fetch that republished the same run changes nothing; for a folder
    without one, which folder it is. None when there is none."""
    try:
        st = os.stat(run_dir)
        if not stat.S_ISDIR(st.st_mode):
            return None
        manifest = run_dir / "manifest.json"
        if manifest.is_symlink() or not manifest.is_file():
            return f"{_FOLDER_RESULTS}{st.st_dev}:{st.st_ino}"
        with open(manifest, "rb") as f:
            return hashlib.sha256(f.read(boundary.LIMITS.manifest_bytes + 1)).hexdigest()
    except OSError:
        return None


def names_every_result_file(results: str) -> bool:
    """Whether `results` (from results_of) is a manifest's sha256, which fixes every result
    file's bytes, rather than which folder it was."""
    return not results.startswith(_FOLDER_RESULTS)


def _being_published(run_dir: Path) -> bool:
    """Whether a fetch is between its two renames: the old copy is aside, the new not in."""
    return run_dir.with_name(f".{run_dir.name}.old").exists()


def kept_changing(run_dir: Path) -> ResultsError:
    return ResultsError(
        f"{boundary.printable(run_dir)} held other results at every one of "
        f"{SNAPSHOT_ATTEMPTS} reads: a fetch keeps replacing them; report again once it ends"
    )


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
    latencies, telemetry = _samples(
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
    checks = [
        row
        for name in boundary.CHECK_FILES
        if (results / name).is_file()
        for row in boundary.checked_rows(results / name, name, run_id, plan=plan)
    ]
    run = RunResults(
        run_id or run_dir.name,
        status,
        plan,
        summary,
        latencies,
        statistics,
        manifest,
        profile,
        telemetry=telemetry,
        checks=checks,
    )
    return run.judged_at(plan.margin) if plan is not None else run


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


def _samples(measurements) -> tuple[dict[tuple[str, str], np.ndarray], list[RoundTelemetry]]:
    """Only what the report uses, in one pass: a float per sample for the comparison and
    plots, not a model per row, and each round's GPU readings."""
    grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
    rounds = RoundCollector()
    for m in measurements:
        grouped[(m.config, m.implementation)].append(m.latency_ms)
        rounds.add(m)
    return {k: np.asarray(v) for k, v in grouped.items()}, rounds.rounds()
