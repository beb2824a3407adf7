"""The trust boundary: where a run's files from a store become data bench may act on.

A VM runs code nobody reviewed, and anyone with access to the bucket can write a run, so
manifest.json, status.json, the CSVs and logs are untrusted until they pass here. Every
limit is in `LIMITS`; every refusal is a ResultsError (exit 5) that names the run. What is
printed from a run goes through `printable` or `markup_safe` (control characters escaped,
rich markup shown as text).

Every number a run hands back is bounded by what the run could have done: its phases by
its duration, its duration by its time cap, its cost by the registry's rate over that
time (the controller's own figure replaces the VM's), its rows by the plan launch built
(read back from the payload whose sha256 the registry holds).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from orchestrator.regular_file import NotRegularFileError, read_regular
from orchestrator.text import printable
from results_schema import CSV_MODELS, Manifest, Plan, Status
from results_schema.csvio import CsvSchemaError, iter_rows
from results_schema.names import RUN_ID_PATTERN
from results_schema.record import (
    HARNESS_TREE,
    MAX_PROFILE_REPORTS,
    PROFILE_FILES,
    PROFILE_REPORT_NAME,
    RESULT_FILES,
    billed_usd,
    payload_tree_digests,
)

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Limits:
    """Bounds on what a run may hand us. The default plan (12 configs × 50 samples × 4
    identities, the A/A control included: 2,400 measurement rows, ≈ 270 kB; 96 timed-check
    rows) sits two orders of magnitude below every one of them."""

    manifest_bytes: int = 1 << 20
    status_bytes: int = 64 << 10
    log_bytes: int = 32 << 20  # logs/startup.log as fetched
    csv_bytes: tuple[tuple[str, int], ...] = (
        ("measurements.csv", 64 << 20),
        ("summary.csv", 4 << 20),
        ("correctness.csv", 4 << 20),
        ("timed_checks.csv", 4 << 20),
        ("profile.csv", 1 << 20),
    )
    csv_rows: tuple[tuple[str, int], ...] = (
        ("measurements.csv", 250_000),
        ("summary.csv", 4_096),
        ("correctness.csv", 4_096),
        ("timed_checks.csv", 8_192),
        ("profile.csv", 1_024),
    )
    # One Nsight Compute report (a profiled call's few kernels, 5 sections: ~1 MB) and all
    # of a run's together; they are binary and never parsed here.
    profile_report_bytes: int = 32 << 20
    profile_reports_bytes: int = 256 << 20
    configs: int = 256  # a plan's configs: `bench report` draws a panel per config
    json_depth: int = 16  # a manifest nests 5 deep (manifest → plan → configs → config → value)
    json_items: int = 4_096  # entries of one JSON list or object
    string_chars: int = 4_096  # one JSON string or CSV cell
    clock_skew: timedelta = timedelta(minutes=10)  # the VM's clock against this machine's
    # The script times each phase in whole seconds (`date +%s`) and its start truncated to
    # the second: each phase may read up to a second longer than it ran.
    phase_rounding_seconds: float = 1.0
    payload_bytes: int = 256 << 20  # payload.tar.gz, read back for the plan launch put in it

    def bytes_of(self, name: str) -> int:
        if PROFILE_REPORT_NAME.fullmatch(name):
            return self.profile_report_bytes
        return dict(self.csv_bytes)[name]

    def rows_of(self, name: str) -> int:
        return dict(self.csv_rows)[name]


LIMITS = Limits()
# The only files a manifest may list: the names the schema defines, nothing else. Every
# complete run holds RESULT_PATHS; a profiled one also profile.csv and numbered reports.
RESULT_PATHS = {f"results/{name}": name for name in RESULT_FILES}
OPTIONAL_PATHS = {f"results/{name}": name for name in PROFILE_FILES}


def result_name(path: str) -> str | None:
    """The schema's name for a manifest path, or None when the schema names no such file."""
    known = RESULT_PATHS.get(path) or OPTIONAL_PATHS.get(path)
    if known:
        return known
    name = path.removeprefix("results/")
    return name if path.startswith("results/") and PROFILE_REPORT_NAME.fullmatch(name) else None


def is_profile_report(name: str) -> bool:
    return PROFILE_REPORT_NAME.fullmatch(name) is not None


# --- JSON --------------------------------------------------------------------------------


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {printable(key, 60)!r}")
        data[key] = value
    return data


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(raw: bytes, max_bytes: int, limits: Limits = LIMITS) -> Any:
    """Parse bounded, strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, bounded
    depth, list lengths and string lengths. ValueError says what was wrong."""
    if len(raw) > max_bytes:
        raise ValueError(f"{len(raw)} bytes, more than the {max_bytes} allowed")
    try:
        text = raw.decode("utf-8")
        data = json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {limits.json_depth} levels") from None
    _check_shape(data, limits)
    return data


def _check_shape(data: Any, limits: Limits) -> None:
    """Walk without recursion: depth, container sizes and string lengths."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > limits.json_depth:
            raise ValueError(f"nested deeper than {limits.json_depth} levels")
        if isinstance(value, str):
            if len(value) > limits.string_chars:
                raise ValueError(
                    f"a string of {len(value)} characters (most {limits.string_chars})"
                )
        elif isinstance(value, (list, dict)):
            if len(value) > limits.json_items:
                raise ValueError(f"a list or object of {len(value)} entries")
            children = value.values() if isinstance(value, dict) else value
            if isinstance(value, dict):
                pending.extend((key, depth + 1) for key in value)
            pending.extend((child, depth + 1) for child in children)


def _model(data: Any, model: type[Model]) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ValueError(f"{where}: {first['msg']}") from None


def _read_object(store, key: str, max_bytes: int) -> bytes | None:
    try:
        return store.get_bytes(key, max_bytes=max_bytes)
    except NotFoundError:
        return None


# --- manifest and status -----------------------------------------------------------------


def read_manifest(store, record: RunRecord, limits: Limits = LIMITS) -> Manifest | None:
    """The run's manifest, validated against the schema and the registry; None if the run
    has none yet."""
    raw = _read_object(store, f"{record.run_key}/manifest.json", limits.manifest_bytes)
    if raw is None:
        return None
    return manifest_from(raw, record.run_id, record, limits)


def manifest_from(
    raw: bytes, run_id: str | None, record: RunRecord | None = None, limits: Limits = LIMITS
) -> Manifest:
    """A manifest of run_id (None: of whichever run it names) that passed every check."""
    try:
        manifest = _model(parse_json(raw, limits.manifest_bytes, limits), Manifest)
        _check_manifest(manifest, run_id or manifest.run_id, limits)
        if record is not None:
            _check_against_registry(manifest, record, limits)
            manifest = _with_billed_cost(manifest, record, limits)
    except ValueError as e:
        where = f"run {run_id}" if run_id else "a fetched run"
        raise ResultsError(f"{where}: manifest.json is invalid: {printable(e)}") from None
    return manifest


def read_status(store, record: RunRecord, limits: Limits = LIMITS) -> Status | None:
    raw = _read_object(store, f"{record.run_key}/status.json", limits.status_bytes)
    if raw is None:
        return None
    try:
        status = _model(parse_json(raw, limits.status_bytes, limits), Status)
        if status.run_id != record.run_id:
            raise ValueError(f"it belongs to run {printable(status.run_id, 40)!r}")
    except ValueError as e:
        raise ResultsError(f"run {record.run_id}: status.json is invalid: {printable(e)}") from None
    return status


def _check_manifest(manifest: Manifest, run_id: str, limits: Limits) -> None:
    if manifest.run_id != run_id:
        raise ValueError(f"it belongs to run {printable(manifest.run_id, 40)!r}")
    seen = set()
    for entry in manifest.files:
        name = result_name(entry.path)
        if name is None:
            raise ValueError(
                f"it lists {printable(entry.path, 80)!r}; a run may only hold "
                f"{', '.join(sorted(RESULT_PATHS | OPTIONAL_PATHS))} and "
                "results/profile-NNN.ncu-rep"
            )
        if entry.path in seen:
            raise ValueError(f"it lists {entry.path} twice")
        seen.add(entry.path)
        if entry.bytes > limits.bytes_of(name):
            raise ValueError(f"{entry.path} has {entry.bytes} bytes (most {limits.bytes_of(name)})")
        if is_profile_report(name):
            if entry.rows is not None:
                raise ValueError(f"{entry.path} is a binary report, not rows")
        elif entry.rows is not None and entry.rows > limits.rows_of(name):
            raise ValueError(f"{entry.path} has {entry.rows} rows (most {limits.rows_of(name)})")
    _check_profile_reports(manifest, limits)
    if manifest.status == "complete" and not seen >= set(RESULT_PATHS):
        raise ValueError(f"a complete run lacks {', '.join(sorted(set(RESULT_PATHS) - seen))}")
    measured = manifest.file("results/measurements.csv")
    if manifest.status == "partial" and not (measured and measured.rows):
        raise ValueError("a partial run lists no measurements")
    if manifest.plan is not None and len(manifest.plan.configs) > limits.configs:
        raise ValueError(
            f"its plan has {len(manifest.plan.configs)} configs (most {limits.configs})"
        )
    if manifest.started_at is not None and manifest.started_at > manifest.finished_at:
        raise ValueError("it finished before it started")
    _check_phase_times(manifest, limits)
    _check_sampling(manifest)


def _check_sampling(manifest: Manifest) -> None:
    """Its sampling record (sampling.json: results_schema/sampling.py) holds to its plan:
    the looks that plan sets (one for a run with nothing to decide), no more samples a
    config than the look it stopped at, its statistics at that look's confidence."""
    sampling, plan = manifest.sampling, manifest.plan
    if sampling is None or plan is None:
        return
    sets = [plan.samples_per_config] if sampling.stopped == "nothing-to-decide" else None
    sets = sets or plan.look_schedule()
    if sampling.schedule != sets:
        raise ValueError(
            f"its sampling set looks at {sampling.schedule[:8]} samples a config; its plan "
            f"sets {sets}"
        )
    measured = manifest.file("results/measurements.csv")
    most = sampling.samples_per_config * len(plan.configs) * len(plan.identities)
    if measured is not None and measured.rows is not None and measured.rows > most:
        raise ValueError(
            f"results/measurements.csv has {measured.rows} rows, more than its sampling took "
            f"({sampling.samples_per_config} a config: {most})"
        )
    statistics = manifest.statistics
    if statistics is not None and abs(statistics.confidence - sampling.confidence) > 1e-9:
        raise ValueError(
            f"its intervals are at {statistics.confidence:.6g}, its last look's at "
            f"{sampling.confidence:.6g}"
        )


def _check_phase_times(manifest: Manifest, limits: Limits) -> None:
    """Phases run one after another inside the run: together no longer than it lasted."""
    if manifest.started_at is None:
        return  # the registry's time cap bounds them (_check_duration)
    lasted = (manifest.finished_at - manifest.started_at).total_seconds()
    total = sum(phase.seconds for phase in manifest.phases)
    if total > lasted + limits.phase_rounding_seconds * (len(manifest.phases) + 1):
        raise ValueError(f"its phases took {total:g} s, longer than the run's {lasted:g} s")


def _check_profile_reports(manifest: Manifest, limits: Limits) -> None:
    reports = [e for e in manifest.files if is_profile_report(e.path.removeprefix("results/"))]
    if len(reports) > MAX_PROFILE_REPORTS:
        raise ValueError(f"it lists {len(reports)} profile reports (most {MAX_PROFILE_REPORTS})")
    total = sum(e.bytes for e in reports)
    if total > limits.profile_reports_bytes:
        raise ValueError(
            f"its profile reports hold {total} bytes (most {limits.profile_reports_bytes})"
        )


def _check_against_registry(manifest: Manifest, record: RunRecord, limits: Limits) -> None:
    """Times within the run's life as the registry saw it, cost within what it could buy."""
    earliest = record.created - limits.clock_skew
    latest = datetime.now(timezone.utc) + limits.clock_skew
    for name in ("started_at", "finished_at"):
        moment = getattr(manifest, name)
        if moment is not None and not earliest <= moment <= latest:
            raise ValueError(
                f"{name} {moment.isoformat()} lies outside the run's life "
                f"(launched {record.created_at})"
            )
    _check_duration(manifest, record, limits)
    cost = manifest.cost
    if cost is None:
        return
    if cost.backend != record.backend:
        raise ValueError(f"cost.backend is {printable(cost.backend, 20)!r}, not {record.backend}")
    if abs(cost.rate_usd_per_hour - record.rate_usd_per_hour) > 1e-9:
        raise ValueError(
            f"cost.rate_usd_per_hour {cost.rate_usd_per_hour} is not the launched rate "
            f"{record.rate_usd_per_hour}"
        )
    # The run cannot outlive its own time cap by more than the clock skew.
    ceiling = billed_usd(
        record.rate_usd_per_hour,
        record.max_run_seconds + limits.clock_skew.total_seconds(),
    )
    if cost.estimated_usd is not None and cost.estimated_usd > ceiling + 1e-6:
        raise ValueError(
            f"cost.estimated_usd {cost.estimated_usd} is more than the run could cost "
            f"({ceiling:.6f})"
        )


def _check_duration(manifest: Manifest, record: RunRecord, limits: Limits) -> None:
    """No run outlives its time cap (by more than the clocks' skew): not the script, and
    not its phases together when it never said when it started."""
    cap = record.max_run_seconds + limits.clock_skew.total_seconds()
    if manifest.started_at is not None:
        lasted = (manifest.finished_at - manifest.started_at).total_seconds()
        what = f"it ran {lasted:g} s"
    else:
        lasted = sum(phase.seconds for phase in manifest.phases)
        what = f"its phases took {lasted:g} s"
    if lasted > cap:
        raise ValueError(f"{what}, longer than its time cap of {record.max_run_seconds} s")


def billed_cost(manifest: Manifest, record: RunRecord, limits: Limits = LIMITS) -> float:
    """What the run cost as the controller reckons it: the registry's rate over the run's
    life, from the launch to the manifest's finish (which the boundary held inside that
    life), at most its time cap. Never the VM's own figure: a VM can claim $0."""
    life = (manifest.finished_at - record.created).total_seconds()
    seconds = min(max(life, 0.0), record.max_run_seconds + limits.clock_skew.total_seconds())
    return round(billed_usd(record.rate_usd_per_hour, seconds), 6)


def _with_billed_cost(manifest: Manifest, record: RunRecord, limits: Limits) -> Manifest:
    """The manifest with its cost as the controller reckons it, for everything that shows it."""
    if manifest.cost is None:
        return manifest
    cost = manifest.cost.model_copy(update={"estimated_usd": billed_cost(manifest, record, limits)})
    return manifest.model_copy(update={"cost": cost})


# --- the plan launch built ---------------------------------------------------------------

# The placeholder launch records before the payload is built, and a run from before the
# registry kept the payload's sha256: neither names a payload to read the plan from.
UNKNOWN_PAYLOADS = ("", "0" * 64)


@dataclass(frozen=True)
class LaunchedPayload:
    """What launch packed, read back: the plan, and each tree's digest (the harness's, each
    kernel tree's folder's), which the run's manifest says it checked its trees against."""

    plan: Plan
    tree_sha256s: dict[str, str]


def launched_payload(store, record: RunRecord, limits: Limits = LIMITS) -> LaunchedPayload | None:
    """The run's payload read back from the store and held to the sha256 the registry
    recorded at launch, so a VM that rewrote its payload is caught; None for a run whose
    payload the registry does not know."""
    if record.payload_sha256 in UNKNOWN_PAYLOADS:
        return None
    where = f"run {record.run_id}: payload.tar.gz"
    try:
        raw = store.get_bytes(f"{record.run_key}/payload.tar.gz", max_bytes=limits.payload_bytes)
    except NotFoundError:
        raise ResultsError(
            f"{where} is gone from the store: the run's plan cannot be checked"
        ) from None
    if hashlib.sha256(raw).hexdigest() != record.payload_sha256:
        raise ResultsError(f"{where} is not the one launch built (its sha256 differs)")
    try:
        plan_json, digests = read_payload(raw, limits)
        return LaunchedPayload(
            _model(parse_json(plan_json, limits.manifest_bytes, limits), Plan), digests
        )
    except (ValueError, KeyError, OSError, EOFError, tarfile.TarError) as e:
        raise ResultsError(f"{where} holds no valid plan.json: {printable(e, 200)}") from None


def read_payload(payload: bytes, limits: Limits = LIMITS) -> tuple[bytes, dict[str, str]]:
    """A payload tarball's plan.json and its trees' digests (results_schema.record)."""
    plan_json, members = None, []
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r|gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            if member.name == "plan.json" and member.size > limits.manifest_bytes:
                raise ValueError(f"plan.json has {member.size} bytes")
            data = tar.extractfile(member).read()
            plan_json = data if member.name == "plan.json" else plan_json
            members.append((member.name, hashlib.sha256(data).hexdigest()))
    if plan_json is None:
        raise ValueError("it holds no plan.json")
    return plan_json, payload_tree_digests(members)


def with_launched_payload(
    manifest: Manifest, launched: LaunchedPayload | None, run_id: str
) -> Manifest:
    """The manifest carrying the plan launch built. The payload writes that plan back
    unchanged, so a manifest naming another is refused; one that names none gets it. Its
    tree checks must name launch's trees and digests (`_check_trees`)."""
    if launched is None:
        return manifest
    plan = launched.plan
    if manifest.plan is not None and manifest.plan.content_sha256() != plan.content_sha256():
        raise ResultsError(
            f"run {run_id}: manifest.json names a plan other than the one launched "
            f"({printable(manifest.plan.name, 60)!r}, not {printable(plan.name, 60)!r})"
        )
    try:
        _check_trees(manifest, launched.tree_sha256s)
    except ValueError as e:
        raise ResultsError(f"run {run_id}: manifest.json is invalid: {printable(e)}") from None
    return manifest.model_copy(update={"plan": plan})


def _check_trees(manifest: Manifest, launched: dict[str, str]) -> None:
    """The manifest's trees, leftovers and kernel users name only trees launch packed; each
    check against launch's digest names that digest; a complete run failed none."""
    named = [c.tree for c in manifest.trees or []]
    named += [s.tree for s in manifest.leftovers or [] if s.tree is not None]
    named += list(manifest.containment.kernel_users) if manifest.containment else []
    strangers = sorted(set(named) - set(launched))
    if strangers:
        raise ValueError(f"it names trees launch did not pack: {', '.join(strangers)}")
    for check in manifest.trees or []:
        against_launch = check.stage == "build" or (
            check.stage == "measure" and check.tree == HARNESS_TREE
        )
        if against_launch and check.expected_sha256 != launched[check.tree]:
            raise ValueError(
                f"it checked {check.tree} ({check.stage}) against a digest launch did not pack"
            )
        if manifest.status == "complete" and not check.passed:
            raise ValueError(f"a complete run failed its check of {check.tree} ({check.stage})")


# --- fetched files -----------------------------------------------------------------------


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


def fetched_manifest(run_dir: Path, limits: Limits = LIMITS) -> Manifest | None:
    """The manifest in a fetched run's directory, or None: the same checks as at fetch
    (but for the registry's, which a copied or renamed folder may not match)."""
    path = run_dir / "manifest.json"
    try:
        raw = read_regular(path, limits.manifest_bytes)
    except FileNotFoundError:
        return None
    except NotRegularFileError:
        raise ResultsError(f"run {run_dir.name}: {path} is not a regular file") from None
    return manifest_from(raw, None, None, limits)
