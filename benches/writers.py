"""Every file the harness writes: CSVs of results_schema rows, status.json, manifest.json.

CSV columns are the row model's fields in order; None is written as an empty cell, booleans
as true/false, datetimes in ISO 8601 with their UTC offset.

The code under test can reach the run's folder (on the local backend it runs as the same
user; a worker finds the files its harness holds open in /proc), so every results file this
process writes (the CSVs, statistics.json, comparison.json, noise.json, ranking.json) keeps
the sha256 of the bytes written to it, is checked against it when closed, and all of them
once more just before the manifest vouches for them: a file that holds anything else fails
the run, naming it (`ResultsChanged`). A write after that last check (by a process the kernel left
behind) is not seen here: keeping the results out of the kernel's reach is containment's.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from results_schema import (
    IntervalMethod,
    Manifest,
    Measurement,
    Plan,
    Status,
    SummaryRow,
    csvio,
    record,
)
from results_schema.csvio import cell, columns
from results_schema.csvio import read_rows as read_csv
from results_schema.models import Noise
from results_schema.ranking import Ranking
from results_schema.sampling import FAMILY_ALPHA

__all__ = ["CsvWriter", "ResultsChanged", "cell", "columns", "read_csv", "write_csv"]

RESULTS_SUBDIR = "results"  # DESIGN.md's run layout: <run dir>/results/*.csv, manifest beside it


class ResultsChanged(RuntimeError):
    """A results file that no longer holds what the harness wrote to it."""


# Every results file this process wrote (resolved path) -> the sha256 of what it wrote.
_WRITTEN: dict[Path, str] = {}


def _vouch(path: Path, sha256: str) -> None:
    """Records what the harness wrote to `path` and checks the file holds exactly that."""
    _WRITTEN[path.resolve()] = sha256
    _verify(path.resolve(), sha256)


def _verify(path: Path, sha256: str) -> None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        found = digest.hexdigest()
    except OSError as exc:
        found = f"unreadable ({exc.strerror})"
    if found != sha256:
        name = f"{RESULTS_SUBDIR}/{path.name}" if path.parent.name == RESULTS_SUBDIR else path.name
        raise ResultsChanged(
            f"{name} changed after the harness wrote it (sha256 {found[:16]}, the harness "
            f"wrote {sha256[:16]}): something else writes into the run's results"
        )


def verify_written(run_dir: Path) -> None:
    """Every results file this process wrote under `run_dir` checked once more."""
    root = run_dir.resolve()
    for path, sha256 in _WRITTEN.items():
        if path.is_relative_to(root):
            _verify(path, sha256)


def write_text(path: Path, text: str) -> None:
    """A results file written whole (statistics.json, comparison.json, noise.json), vouched
    for as CsvWriter's are."""
    data = text.encode("utf-8")
    path.write_bytes(data)
    _vouch(path, hashlib.sha256(data).hexdigest())


class _Digesting:
    """A text file that keeps the sha256 of everything written through it (newline="":
    the text is the bytes, UTF-8)."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w", newline="", encoding="utf-8")
        self.sha256 = hashlib.sha256()

    def write(self, text: str) -> int:
        self.sha256.update(text.encode("utf-8"))
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class CsvWriter(csvio.CsvWriter):
    """results_schema's CSV writer, vouching for its file: on closing, the file must hold
    exactly the bytes written through it (ResultsChanged otherwise)."""

    def _open(self, path: Path) -> IO[str]:
        self._digesting = _Digesting(path)
        return self._digesting

    def close(self) -> None:
        super().close()
        _vouch(self.path, self._digesting.sha256.hexdigest())


def write_csv(path: Path, model: type[BaseModel], rows) -> int:
    with CsvWriter(path, model) as writer:
        writer.write(rows)
        return writer.rows


class StatusWriter:
    """Rewrites status.json (record.py's shape, checked against results_schema.Status) at
    most once per `interval` seconds unless forced; a no-op without a path."""

    def __init__(self, path: Path | None, run_id: str, interval: float = 1.0) -> None:
        self.path = path
        self.run_id = run_id
        self.interval = interval
        self._last = 0.0

    def update(
        self, phase: str, state: str, done: int, total: int, message: str, force: bool = False
    ) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        Status.model_validate(  # never write what the controller would refuse
            {
                "run_id": self.run_id,
                "phase": phase,
                "state": state,
                "done": done,
                "total": total,
                "updated_at": datetime.now(timezone.utc),
                "message": message,
            }
        )
        record.write_status(str(self.path), self.run_id, phase, state, done, total, message)


class PhaseClock:
    """The startup script's phases.tsv lines for the phases this process runs. The script
    runs the gate and the timing in one process (one `import torch`, one start of each
    kernel's worker, instead of two of each) and leaves their lines to it: `correctness`
    from the script's phase start to the gate's end, `benchmark` from there to the end."""

    def __init__(self, path: Path | None, started_epoch: float | None) -> None:
        self.path = path
        self.mark = started_epoch if started_epoch is not None else time.time()

    def ended(self, phase: str) -> None:
        if self.path is None:
            return
        now = time.time()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{phase}\t{round(now - self.mark)}\t0\n")
        self.mark = now


def write_manifest(run_dir: Path, run_id: str, started_at: datetime) -> Manifest:
    """manifest.json with status complete, built by the same code the startup script uses
    (sha256, bytes and rows of each results/*.csv; plan.json and environment.json beside).
    noise.json, the A/A control's decision on the run, and ranking.json, its candidates
    ranked, are written first, so that both this manifest and the startup script's final
    one carry them. Every results file this process wrote is checked first
    (ResultsChanged)."""
    write_noise(run_dir)
    write_ranking(run_dir)
    verify_written(run_dir)
    args = argparse.Namespace(
        dir=str(run_dir),
        run_id=run_id,
        exit_code=0,
        interrupted=False,
        reason="",
        failed_phase="",
        started_at=started_at.isoformat(),
        cost_json="",
    )
    built = record.build_manifest(args)
    manifest = Manifest.model_validate(built)  # never write what the controller would refuse
    record.write_manifest(str(run_dir), built)
    return manifest


def _confidence(run_dir: Path) -> float:
    """The run's intervals' confidence (statistics.json: a sampled run's last look's), 95%
    for a run directory without one."""
    path = run_dir / "statistics.json"
    if not path.is_file():
        return 1 - FAMILY_ALPHA
    return IntervalMethod.model_validate_json(path.read_text(encoding="utf-8")).confidence


def write_noise(run_dir: Path) -> Noise | None:
    """noise.json from the run's own plan.json and results (none without an A/A control).
    Made from the files, not from the runner's memory: what the manifest vouches for is
    what was written."""
    from benches.noise import control_noise  # numpy: only where a run is summarised

    results = run_dir / RESULTS_SUBDIR
    if not (results / "summary.csv").is_file():
        return None
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text(encoding="utf-8"))
    noise = control_noise(
        plan, read_csv(results / "measurements.csv", Measurement),
        read_csv(results / "summary.csv", SummaryRow), alpha=1 - _confidence(run_dir),
    )  # fmt: skip
    path = run_dir / "noise.json"
    _replace_side_file(path, noise)
    return noise


def write_ranking(run_dir: Path) -> Ranking | None:
    """ranking.json from the run's own plan.json and results, as noise.json is (none
    without a candidate to rank)."""
    from benches.ranking import rank  # numpy: only where a run is summarised

    results = run_dir / RESULTS_SUBDIR
    if not (results / "summary.csv").is_file():
        return None
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text(encoding="utf-8"))
    ranking = rank(
        plan, read_csv(results / "measurements.csv", Measurement),
        read_csv(results / "summary.csv", SummaryRow), confidence=_confidence(run_dir),
    )  # fmt: skip
    _replace_side_file(run_dir / "ranking.json", ranking)
    return ranking


def _replace_side_file(path: Path, model: BaseModel | None) -> None:
    """`model` written whole to `path`, or with none the file removed: a stale one from an
    earlier plan would be believed."""
    if model is None:
        path.unlink(missing_ok=True)
        _WRITTEN.pop(path.resolve(), None)
    else:
        write_text(path, model.model_dump_json(indent=2) + "\n")
