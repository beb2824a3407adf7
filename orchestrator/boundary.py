"""The trust boundary: where a run's files from a store become data bench may act on.

A VM runs code nobody reviewed, and anyone with access to the bucket can write a run, so
manifest.json, status.json, the CSVs and logs are untrusted until they pass here. Every
limit is in `LIMITS`; every refusal is a ResultsError (exit 5) that names the run. What is
printed from a run goes through `printable` or `markup_safe` (control characters escaped,
rich markup shown as text).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from results_schema import CSV_MODELS, Manifest, Status
from results_schema.csvio import CsvSchemaError, iter_rows
from results_schema.names import run_key
from results_schema.record import (
    MAX_PROFILE_REPORTS,
    PROFILE_FILES,
    PROFILE_REPORT_NAME,
    RESULT_FILES,
    billed_usd,
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


# --- printing ----------------------------------------------------------------------------


def printable(value: object, max_chars: int | None = None) -> str:
    """Text with every control or format character (C0, DEL, C1, bidi overrides) shown as
    an escape, so nothing from a run can drive the terminal."""
    text = str(value)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars] + "…"
    return "".join(_escaped(ch) if _is_control(ch) else ch for ch in text)


def markup_safe(value: object, max_chars: int | None = None) -> str:
    """`printable`, and rich markup shown as text, for a string rich will print."""
    from rich.markup import escape

    return escape(printable(value, max_chars))


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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
    raw = _read_object(store, f"{run_key(record.run_id)}/manifest.json", limits.manifest_bytes)
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
    except ValueError as e:
        where = f"run {run_id}" if run_id else "a fetched run"
        raise ResultsError(f"{where}: manifest.json is invalid: {printable(e)}") from None
    return manifest


def read_status(store, record: RunRecord, limits: Limits = LIMITS) -> Status | None:
    raw = _read_object(store, f"{run_key(record.run_id)}/status.json", limits.status_bytes)
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


# --- fetched files -----------------------------------------------------------------------


def staging_dir(dest: Path, run_id: str) -> Path:
    """A fresh dest/.staging-<run id>/, after removing what a killed fetch left there."""
    staging = dest / f".staging-{run_id}"
    if staging.is_symlink() or staging.is_file():
        staging.unlink()
    elif staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def result_target(staging: Path, path: str) -> Path:
    """Where a manifest entry lands: a name of the schema's, never the manifest's own text."""
    name = result_name(path)
    if name is None:  # the manifest was checked first; this guards a direct call
        raise ResultsError(f"{printable(path, 80)!r} is not a result file of the schema")
    return staging / "results" / name


def verify_result_file(target: Path, entry, run_id: str, limits: Limits = LIMITS) -> list:
    """Check size and sha256, then every row, streaming; returns the rows of summary.csv
    (kept: they are few and fetch shows them) and nothing for the other files. A profile
    report is binary: its size and sha256 are all that is checked, it is never parsed."""
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
    for row in checked_rows(target, name, run_id, limits):
        count += 1
        if name == "summary.csv":
            kept.append(row)
    if entry.rows is not None and count != entry.rows:
        raise ResultsError(
            f"run {run_id}: {entry.path}: {count} rows, the manifest says {entry.rows}; "
            "nothing was replaced"
        )
    return kept


def checked_rows(path: Path, name: str, run_id: str | None, limits: Limits = LIMITS) -> Iterator:
    """The rows of one result file, one at a time: each valid, of this run (None: of the
    first row's run), within the limits. Memory stays at one row whatever the file holds."""
    label = run_id or path.parent.parent.name
    max_rows = limits.rows_of(name)
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
            yield row
    except CsvSchemaError as e:
        raise ResultsError(f"run {label}: {printable(e, 300)}; nothing was replaced") from None


def _check_strings(row: BaseModel, run_id: str, name: str, line: int, limits: Limits) -> None:
    for field, value in row:
        if isinstance(value, str) and len(value) > limits.string_chars:
            raise ResultsError(
                f"run {run_id}: {name} row {line}: {field} has {len(value)} characters "
                f"(most {limits.string_chars})"
            )


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
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise ResultsError(f"run {run_dir.name}: {path} is not a regular file")
    with open(path, "rb") as f:
        raw = f.read(limits.manifest_bytes + 1)
    return manifest_from(raw, None, None, limits)
