"""clean: free the disk that finished local runs hold (their sandboxes and store copies).

Only local runs leave state on this machine. A run whose script still runs, or that is
still being launched, is never touched; nor is one nobody fetched yet, unless asked
(`include_unfetched`): its store copy is the only copy of its results. Fetched results
(results/<run id>/) are the user's and stay, and so does every registry row (history and
the monthly cap read them); a row whose files went says when (`cleaned_at`), so `status`
and `fetch` say "deleted by bench clean", not "lost".
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.service.runs import placement_of

NOT_FETCHED = "not fetched yet"  # why clean keeps a run nobody fetched


@dataclass
class Removal:
    run_id: str
    path: Path
    bytes: int


@dataclass
class CleanResult:
    removed: list[Removal] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # run id -> why it stays
    unfetched: list[str] = field(default_factory=list)  # removed runs nobody fetched

    @property
    def bytes_freed(self) -> int:
        return sum(r.bytes for r in self.removed)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (links not followed, so nothing outside is counted)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def clean(ctx: Context, dry_run: bool = False, include_unfetched: bool = False) -> CleanResult:
    result = CleanResult()
    for record in ctx.registry.all():
        if not ctx.capabilities(record.backend).keeps_files_here:
            continue
        busy = _still_busy(ctx, record)
        if busy:
            result.kept[record.run_id] = busy
            continue
        paths = [p for p in _local_state(ctx, record) if p.exists() or p.is_symlink()]
        if not paths:
            continue
        if record.awaiting_fetch and not include_unfetched:
            result.kept[record.run_id] = NOT_FETCHED
            continue
        if record.awaiting_fetch:
            result.unfetched.append(record.run_id)
        for path in paths:
            result.removed.append(Removal(record.run_id, path, tree_bytes(path)))
            if not dry_run:
                _remove(path)
        if not dry_run:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            ctx.registry.update(record.run_id, cleaned_at=now)
    return result


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _still_busy(ctx: Context, record: RunRecord) -> str:
    if record.state == "launching":
        return "it is being launched"
    state = ctx.backend(record.backend).machine_state(record.run_id, placement_of(record))
    return "it is still running" if state in ("RUNNING", "STOPPING") else ""


def _local_state(ctx: Context, record: RunRecord) -> list[Path]:
    return ctx.backend(record.backend).local_files(record.run_id, record.run_key)
