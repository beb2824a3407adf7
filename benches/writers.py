"""Every file the harness writes: CSVs of results_schema rows, status.json, manifest.json.

CSV columns are the row model's fields in order; None is written as an empty cell, booleans
as true/false, datetimes in ISO 8601 with their UTC offset.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path

from results_schema import Manifest, Measurement, Plan, Status, SummaryRow, record
from results_schema.csvio import CsvWriter, cell, columns, write_csv
from results_schema.csvio import read_rows as read_csv
from results_schema.models import Noise

__all__ = ["CsvWriter", "cell", "columns", "read_csv", "write_csv"]

RESULTS_SUBDIR = "results"  # DESIGN.md's run layout: <run dir>/results/*.csv, manifest beside it


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
    noise.json, the A/A control's decision on the run, is written first, so that both
    this manifest and the startup script's final one carry it."""
    write_noise(run_dir)
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
        read_csv(results / "summary.csv", SummaryRow),
    )  # fmt: skip
    path = run_dir / "noise.json"
    if noise is None:
        path.unlink(missing_ok=True)  # a stale one from an earlier plan would be believed
    else:
        path.write_text(noise.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return noise
