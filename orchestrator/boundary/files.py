"""A fetched run's files on this machine: the private folders fetch and report work in,
where each listed file lands (a name of the schema's, never the manifest's text), and its
rows checked one at a time against the manifest, the plan and the limits. Nothing is
written outside the run's folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

from orchestrator.boundary.limits import LIMITS, Limits, is_profile_report, result_name
from orchestrator.errors import ResultsError
from orchestrator.text import printable
from results_schema import CSV_MODELS, Plan
from results_schema.csvio import CsvSchemaError, iter_rows
from results_schema.names import RUN_ID_PATTERN

# Where fetch downloads a run before publishing it (DEST/.staging-<run id>-<random>/), and
# where report draws before publishing its plots (DEST/.report-<run id>-<random>/).
STAGING_PREFIX = ".staging-"
RUN_ID_START = re.compile(RUN_ID_PATTERN.removesuffix("$"))
DRAFT_REPORT_PREFIX = ".report-"
REPORT_SUBDIR = "report"  # <run dir>/report/: the plots `bench report` publishes


@contextmanager
def private_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder parent/<prefix><random>, under an exclusive flock while in use, then
    removed (unless the caller renamed it away to publish it). A killed process's lock
    dies with it, which is how `remove_abandoned` tells its folder from one in use. The
    parent must exist: a folder that vanished (a run's, swapped out by a fetch) is never
    made again here."""
    path, lock = _new_locked_dir(parent, prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(lock)


def remove_abandoned(parent: Path, prefix: str) -> None:
    """Remove every parent/<prefix><run id>* no live process holds: what a killed fetch or
    report left (only names bench makes: a user's own folder is no business of ours). A
    link or file of that name is removed, never followed."""
    if not parent.is_dir():
        return
    for path in parent.iterdir():
        name = path.name
        if not (name.startswith(prefix) and RUN_ID_START.match(name[len(prefix) :])):
            continue
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
            continue
        lock = _lock(path)
        if lock is not None:  # else another fetch or report is using it
            shutil.rmtree(path, ignore_errors=True)
            os.close(lock)


def _new_locked_dir(parent: Path, prefix: str) -> tuple[Path, int]:
    # A cleaner may lock and remove a folder between its creation and our lock: make another.
    # mkdir, not mkdtemp: a staging folder becomes the run's, with the umask's usual mode.
    for _ in range(8):
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        lock = _lock(path)
        if lock is not None:
            return path, lock
    raise ResultsError(f"could not create a private folder in {parent}: it is being cleaned")


def _lock(path: Path) -> int | None:
    """An exclusive flock on the folder itself (its descriptor), or None when another
    process holds one or the name no longer is that folder."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.path.samestat(os.fstat(fd), os.lstat(path)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def result_target(staging: Path, path: str) -> Path:
    """Where a manifest entry lands: a name of the schema's, never the manifest's own text."""
    name = result_name(path)
    if name is None:  # the manifest was checked first; this guards a direct call
        raise ResultsError(f"{printable(path, 80)!r} is not a result file of the schema")
    return staging / "results" / name


def verify_result_file(
    target: Path, entry, run_id: str, limits: Limits = LIMITS, plan: Plan | None = None
) -> list:
    """Check size and sha256, then every row, streaming (of the plan's configs, when it is
    known); returns the rows of summary.csv and the failed rows of the checks (kept: they
    are few and fetch shows them) and nothing else. A profile report is binary: its size
    and sha256 are all that is checked, it is never parsed."""
    name = result_name(entry.path)
    size, digest = _size_and_sha256(target)
    if digest != entry.sha256 or size != entry.bytes:
        raise ResultsError(
            f"run {run_id}: {entry.path}: sha256 {digest[:12]}… ({size} bytes) does not match "
            f"the manifest's {entry.sha256[:12]}… ({entry.bytes} bytes): the file is corrupt; "
            "nothing was replaced"
        )
    kept, count = [], 0
    if is_profile_report(name):
        return kept
    for row in checked_rows(target, name, run_id, limits, plan):
        count += 1
        if name == "summary.csv" or (name in CHECK_FILES and not row.passed):
            kept.append(row)
    if entry.rows is not None and count != entry.rows:
        raise ResultsError(
            f"run {run_id}: {entry.path}: {count} rows, the manifest says {entry.rows}; "
            "nothing was replaced"
        )
    return kept


def checked_rows(
    path: Path, name: str, run_id: str | None, limits: Limits = LIMITS, plan: Plan | None = None
) -> Iterator:
    """The rows of one result file, one at a time: each valid, of this run (None: of the
    first row's run), of the plan's configs and identities (when the plan is known: a run
    reports at most what it was asked to measure), within the limits. Memory stays at one
    row whatever the file holds."""
    label = run_id or path.parent.parent.name
    max_rows = limits.rows_of(name)
    in_plan = _plan_check(plan, name)
    if path.is_symlink() or not path.is_file():
        raise ResultsError(f"run {label}: {name} is not a regular file")
    if path.stat().st_size > limits.bytes_of(name):
        raise ResultsError(
            f"run {label}: {name} has {path.stat().st_size} bytes (most {limits.bytes_of(name)})"
        )
    try:
        for count, row in enumerate(iter_rows(path, CSV_MODELS[name]), start=1):
            run_id = run_id or row.run_id
            if count > max_rows:
                raise ResultsError(f"run {label}: {name} has more than {max_rows} rows")
            if row.run_id != run_id:
                raise ResultsError(
                    f"run {label}: {name} row {count} belongs to run {printable(row.run_id, 40)!r}"
                )
            _check_strings(row, label, name, count, limits)
            problem = in_plan(row)
            if problem:
                raise ResultsError(f"run {label}: {name} row {count} {problem}")
            yield row
    except CsvSchemaError as e:
        raise ResultsError(f"run {label}: {printable(e, 300)}; nothing was replaced") from None


# The files of checks (correctness rows): the gate's, and those on the timed loop's outputs.
CHECK_FILES = ("correctness.csv", "timed_checks.csv")
# The files whose rows are one per timed identity. The correctness files also name the
# yardsticks the gate checks (benches/correctness.py), so only their config is held to the
# plan, as profile.csv's.
IDENTITY_ROWS = ("measurements.csv", "summary.csv")


def _plan_check(plan: Plan | None, name: str):
    """A row's problem with the plan (None when it has none): a config the plan lacks, or
    an identity it does not time."""
    if plan is None:
        return lambda row: None
    configs = {config.name for config in plan.configs}
    identities = set(plan.identities) if name in IDENTITY_ROWS else None

    def problem(row: BaseModel) -> str | None:
        if row.config not in configs:
            return f"names config {printable(row.config, 60)!r}, which the plan lacks"
        if identities is not None and row.implementation not in identities:
            return f"names {printable(row.implementation, 60)!r}, which the plan does not time"
        return None

    return problem


# A cell a spreadsheet would run as a formula starts with one of these (OWASP, "CSV
# Injection"); a plain number like -1.5 is data.
FORMULA_PREFIXES = ("=", "+", "-", "@")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _check_strings(row: BaseModel, run_id: str, name: str, line: int, limits: Limits) -> None:
    for field, value in row:
        if not isinstance(value, str):
            continue
        if len(value) > limits.string_chars:
            raise ResultsError(
                f"run {run_id}: {name} row {line}: {field} has {len(value)} characters "
                f"(most {limits.string_chars})"
            )
        hazard = _spreadsheet_hazard(value)
        if hazard:
            raise ResultsError(f"run {run_id}: {name} row {line}: {field} {hazard}")


def _spreadsheet_hazard(text: str) -> str | None:
    """Why a cell is unsafe to hand to a spreadsheet or a C string, or None."""
    if "\x00" in text:
        return "holds a NUL byte"
    if text.startswith(FORMULA_PREFIXES) and not PLAIN_NUMBER.fullmatch(text):
        return f"starts with {text[0]!r}: a spreadsheet would run it as a formula"
    return None


def _size_and_sha256(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()
