"""fetch: download a finished run, verify every sha256, validate every row, then publish.

Everything passes the trust boundary (orchestrator.boundary) first. Files land in
DEST/.staging-<run id>-<random>/ under names of the schema's own (never a name from the
manifest) and replace an earlier copy only once everything checks out, so a corrupt
download never clobbers good results. A fetch holds a lock on its staging folder; any
staging folder nobody holds (a killed fetch's, of any run) is removed by the next fetch.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import boundary
from orchestrator.backends.base import ReportsBilledTime
from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.paths import ensure_writable_dest
from orchestrator.registry import RunRecord
from orchestrator.runtime_model import history_key, recorded_phase_seconds
from orchestrator.service.cache import CacheDecision, promote_cache_candidates
from orchestrator.service.context import Context
from orchestrator.service.runs import latest_run_id, placement_of, records_for
from orchestrator.spec import is_sweep_id
from results_schema import CorrectnessRow, Manifest, SummaryRow
from results_schema.record import billed_usd


@dataclass
class FetchResult:
    run_id: str
    directory: Path
    manifest: Manifest
    summary: list[SummaryRow] = field(default_factory=list)
    # The failed rows of the correctness gate and the timed loop's checks.
    checks: list[CorrectnessRow] = field(default_factory=list)
    released: bool = False
    cache: list[CacheDecision] = field(default_factory=list)  # one per candidate entry


@dataclass
class FetchOutcome:
    attempted: int = 0
    incomplete: list[str] = field(default_factory=list)  # one line per run not complete


def fetch_runs(
    ctx: Context,
    run_id: str | None,
    fetch_all: bool,
    dest: Path,
    on_fetched: Callable[[FetchResult], None],
) -> FetchOutcome:
    """`bench fetch`: one run (RUN_ID, else the latest), every member of a sweep, or with
    `fetch_all` every run not fetched yet; with several, one run's bad files do not stop
    the others."""
    ensure_writable_dest(dest)
    sweep = is_sweep_id(run_id or "")
    if fetch_all:
        records = [r for r in ctx.registry.all() if r.awaiting_fetch and not r.cleaned_at]
    else:
        records = records_for(ctx, run_id or latest_run_id(ctx))
    if sweep:
        # A member that never started has nothing to fetch; `bench status` shows why.
        records = [r for r in records if r.handle]
    outcome = FetchOutcome(attempted=len(records))
    for record in records:
        try:
            result = fetch(ctx, record, dest)
        except ResultsError as e:
            if not (fetch_all or sweep):
                raise
            outcome.incomplete.append(str(e))
            continue
        on_fetched(result)
        if result.manifest.status != "complete":
            reason = boundary.printable(result.manifest.reason)
            outcome.incomplete.append(f"{record.run_id} is {result.manifest.status}: {reason}")
    return outcome


def fetch(ctx: Context, record: RunRecord, dest: Path) -> FetchResult:
    ensure_writable_dest(dest)
    store = ctx.store(record.backend)
    manifest = _manifest(store, record)
    launched = boundary.launched_payload(store, record)
    manifest = boundary.with_launched_payload(manifest, launched, record.run_id)
    plan = launched.plan if launched else None
    boundary.remove_abandoned(dest, boundary.STAGING_PREFIX)
    final = dest / record.run_id
    with boundary.private_dir(dest, f"{boundary.STAGING_PREFIX}{record.run_id}-") as staging:
        summary, checks = _download_and_verify(store, record, manifest, staging)
        _download_log(store, record.run_key, staging / "logs" / "startup.log")
        # Priced before the release: a backend may forget a machine's times with it.
        cost_usd = billed_cost(ctx, record, manifest)
        manifest = _with_cost(manifest, cost_usd)
        (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2))
        _publish(staging, final)
    ctx.backend(record.backend).release(record.run_id, placement_of(record))
    cache = promote_cache_candidates(store, record, plan)
    # The manifest passed the boundary: its state and times are checked values, the cost is
    # the controller's own reckoning, the phase times are history for this plan's content.
    ctx.registry.update(
        record.run_id,
        state=manifest.status,
        finished_at=manifest.finished_at.isoformat(),
        cost_usd=cost_usd,
        phase_seconds=recorded_phase_seconds(manifest, record.created, record.max_run_seconds),
        plan_sha256=history_key(plan) if plan else "",
    )
    return FetchResult(record.run_id, final, manifest, summary, checks, released=True, cache=cache)


def billed_cost(ctx: Context, record: RunRecord, manifest: Manifest) -> float:
    """What the run cost as the controller reckons it, at the registry's rate: each machine
    for as long as its cloud recorded it (`ReportsBilledTime`: every attempt of a Batch
    task, not the queueing before it), each with the one-minute minimum; else the run's life
    from launch to the manifest's finish (boundary.billed_cost)."""
    backend = ctx.backend(record.backend)
    if isinstance(backend, ReportsBilledTime):
        seconds = backend.billed_seconds(record.run_id, placement_of(record))
        if seconds is not None:
            return round(sum(billed_usd(record.rate_usd_per_hour, s) for s in seconds), 6)
    return boundary.billed_cost(manifest, record)


def _with_cost(manifest: Manifest, cost_usd: float) -> Manifest:
    """The fetched copy's manifest says the cost the registry records."""
    if manifest.cost is None:
        return manifest
    cost = manifest.cost.model_copy(update={"estimated_usd": cost_usd})
    return manifest.model_copy(update={"cost": cost})


def _manifest(store, record: RunRecord) -> Manifest:
    manifest = boundary.read_manifest(store, record)
    if manifest is not None:
        return manifest
    if record.cleaned_at:
        raise ResultsError(
            f"run {record.run_id} was deleted by bench clean ({record.cleaned_at[:16]} UTC): "
            "its files are gone, so nothing is left to fetch"
            + ("" if record.awaiting_fetch else "; a copy fetched before stays where it went")
        )
    try:
        status = boundary.read_status(store, record)
    except ResultsError:
        status = None
    where = f" (now in phase {status.phase}, {status.done}/{status.total})" if status else ""
    raise ResultsError(
        f"run {record.run_id} has no manifest yet{where}: it is still running or died without "
        "one; check `bench status` and `bench logs`"
    )


def _download_and_verify(
    store, record: RunRecord, manifest: Manifest, staging: Path
) -> tuple[list, list]:
    """Every listed file downloaded and verified; the summary's rows and the failed
    checks'."""
    run_id = record.run_id
    summary: list = []
    checks: list = []
    for entry in manifest.files:
        target = boundary.result_target(staging, entry.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            store.download(f"{record.run_key}/{entry.path}", target, max_bytes=entry.bytes)
        except ResultsError as e:
            raise ResultsError(f"run {run_id}: {e}; nothing was replaced") from None
        rows = boundary.verify_result_file(target, entry, run_id, plan=manifest.plan)
        if entry.path == "results/summary.csv":
            summary = rows
        if entry.path.removeprefix("results/") in boundary.CHECK_FILES:
            checks += rows
    return summary, checks


def _download_log(store, key: str, target: Path) -> None:
    """The log is a courtesy: bounded, and left out rather than failing the fetch."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        store.download(f"{key}/logs/startup.log", target, max_bytes=boundary.LIMITS.log_bytes)
    except (NotFoundError, ResultsError):
        target.unlink(missing_ok=True)


def _publish(staging: Path, final: Path) -> None:
    """Swap the complete, verified directory in by a rename (a reader sees the old copy or
    the new one, never half of one: report.read_snapshot retries the instant between); the
    old copy is removed only after the swap."""
    old = final.with_name(f".{final.name}.old")
    _remove(old)
    if final.exists() or final.is_symlink():
        _keep_report(final, staging)
        final.rename(old)
    staging.rename(final)
    _remove(old)


def _keep_report(final: Path, staging: Path) -> None:
    """An earlier copy's report/ comes along when the manifest (which holds every result
    file's sha256) is unchanged: its plots still show these results."""
    report = final / boundary.REPORT_SUBDIR
    if final.is_symlink() or report.is_symlink() or not report.is_dir():
        return
    if _file_bytes(final / "manifest.json") == _file_bytes(staging / "manifest.json"):
        with contextlib.suppress(FileNotFoundError):  # a report swapping its plots in
            report.rename(staging / boundary.REPORT_SUBDIR)


def _file_bytes(path: Path) -> bytes | None:
    if path.is_symlink() or not path.is_file():
        return None
    return path.read_bytes()


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
