"""fetch: download a finished run, verify every sha256, validate every row, then publish.

Files land in a temporary directory beside the destination and replace an earlier copy
only once everything checks out, so a corrupt download never clobbers good results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from orchestrator.runtime_model import recorded_phase_seconds
from orchestrator.service.context import Context
from orchestrator.service.runs import placement_of, read_json_object
from results_schema import CSV_MODELS, Manifest, Status, SummaryRow
from results_schema.csvio import CsvSchemaError, read_rows


@dataclass
class FetchResult:
    run_id: str
    directory: Path
    manifest: Manifest
    summary: list[SummaryRow] = field(default_factory=list)
    released: bool = False


def fetch(ctx: Context, record: RunRecord, dest: Path) -> FetchResult:
    store = ctx.store(record.backend)
    prefix = f"runs/{record.run_id}"
    manifest = _manifest(store, prefix, record.run_id)
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{record.run_id}-", dir=dest))
    try:
        summary = _download_and_verify(store, prefix, manifest, staging)
        _download_optional(store, f"{prefix}/logs/startup.log", staging / "logs" / "startup.log")
        (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2))
        final = dest / record.run_id
        _publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    ctx.backend(record.backend).release(record.run_id, placement_of(record))
    cost = manifest.cost.estimated_usd if manifest.cost else None
    ctx.registry.update(
        record.run_id,
        state=manifest.status,
        finished_at=manifest.finished_at.isoformat(),
        cost_usd=cost,
        phase_seconds=recorded_phase_seconds(manifest, record.created),
    )
    return FetchResult(record.run_id, final, manifest, summary, released=True)


def _manifest(store, prefix: str, run_id: str) -> Manifest:
    try:
        raw = store.get_bytes(f"{prefix}/manifest.json")
    except NotFoundError:
        status = read_json_object(store, f"{prefix}/status.json", Status)
        where = f" (now in phase {status.phase}, {status.done}/{status.total})" if status else ""
        raise ResultsError(
            f"run {run_id} has no manifest yet{where}: it is still running or died without "
            "one; check `bench status` and `bench logs`"
        ) from None
    try:
        return Manifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as e:
        raise ResultsError(f"run {run_id}: manifest.json is invalid: {e}") from None


def _download_and_verify(store, prefix: str, manifest: Manifest, staging: Path) -> list:
    summary: list = []
    for entry in manifest.files:
        target = staging / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        store.download(f"{prefix}/{entry.path}", target)
        data = target.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256 or len(data) != entry.bytes:
            raise ResultsError(
                f"{entry.path}: sha256 {digest[:12]}… ({len(data)} bytes) does not match the "
                f"manifest's {entry.sha256[:12]}… ({entry.bytes} bytes): the file is corrupt; "
                "nothing was replaced"
            )
        model = CSV_MODELS.get(Path(entry.path).name)
        if model is None:
            continue
        try:
            rows = read_rows(target, model)
        except CsvSchemaError as e:
            raise ResultsError(f"{entry.path} is invalid: {e}; nothing was replaced") from None
        if entry.rows is not None and len(rows) != entry.rows:
            raise ResultsError(f"{entry.path}: {len(rows)} rows, manifest says {entry.rows}")
        if model is SummaryRow:
            summary = rows
    return summary


def _download_optional(store, key: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        store.download(key, target)
    except NotFoundError:
        pass


def _publish(staging: Path, final: Path) -> None:
    """Swap the verified directory in; the old copy is removed only after the swap."""
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
