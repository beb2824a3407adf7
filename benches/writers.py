"""Every file the harness writes: CSVs of results_schema rows, status.json, manifest.json.

CSV columns are the row model's fields in order; None is written as an empty cell, booleans
as true/false, datetimes in ISO 8601 with their UTC offset.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from results_schema import Manifest, Status, record

RESULTS_SUBDIR = "results"  # DESIGN.md's run layout: <run dir>/results/*.csv, manifest beside it


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def columns(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


class CsvWriter:
    """Appends rows of one model, flushing after each batch so a preempted run keeps them."""

    def __init__(self, path: Path, model: type[BaseModel]) -> None:
        self.path = path
        self.model = model
        self.rows = 0
        self._file: IO[str] = open(path, "w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        self._writer.writerow(columns(model))

    def write(self, rows: Iterable[BaseModel]) -> None:
        fields = columns(self.model)
        for row in rows:
            if not isinstance(row, self.model):
                raise TypeError(f"{self.path.name} holds {self.model.__name__} rows, got {row!r}")
            self._writer.writerow([cell(getattr(row, f)) for f in fields])
            self.rows += 1
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CsvWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_csv(path: Path, model: type[BaseModel], rows: Iterable[BaseModel]) -> int:
    with CsvWriter(path, model) as writer:
        writer.write(rows)
        return writer.rows


def read_csv(path: Path, model: type[BaseModel]) -> list:
    """Rows back as validated models. An empty cell is a field left out, so it takes the
    model's default: None for optional fields, "" for messages."""
    with open(path, newline="", encoding="utf-8") as f:
        return [
            model.model_validate({k: v for k, v in row.items() if v != ""})
            for row in csv.DictReader(f)
        ]


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
        status = Status(
            run_id=self.run_id,
            phase=phase,
            state=state,
            done=done,
            total=total,
            updated_at=datetime.now(timezone.utc),
            message=message,
        )
        record.write_json_atomic(str(self.path), status.model_dump(mode="json"))


def write_manifest(run_dir: Path, run_id: str, started_at: datetime) -> Manifest:
    """manifest.json with status complete, built by the same code the startup script uses
    (sha256, bytes and rows of each results/*.csv; plan.json and environment.json beside)."""
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
    manifest = Manifest.model_validate(record.build_manifest(args))
    record.write_json_atomic(str(run_dir / "manifest.json"), manifest.model_dump(mode="json"))
    return manifest
