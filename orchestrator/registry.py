"""The local run registry: one SQLite row per launched run.

The cloud is the truth about machines (stop-all needs no local state); the registry is
how `status`, `fetch --all`, the monthly cap and runtime estimates find past runs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.errors import NotFoundError

FINISHED_STATES = ("complete", "partial", "failed", "stopped")


@dataclass
class RunRecord:
    run_id: str
    backend: str
    plan: str
    budget_usd: float
    rate_usd_per_hour: float
    max_run_seconds: int
    estimated_seconds: int
    created_at: str
    location: str = ""
    handle: str = ""
    attempts: list[str] = field(default_factory=list)
    spot: bool = True
    state: str = "launched"
    finished_at: str | None = None
    cost_usd: float | None = None
    sandbox: str = ""
    # Seconds per runtime-model phase, from the fetched manifest (runtime_model).
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # A sweep (`launch --gpu a,b`) groups its members; gpu is the gpus.toml key.
    sweep_id: str = ""
    gpu: str = ""

    @property
    def created(self) -> datetime:
        return datetime.fromisoformat(self.created_at)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


_COLUMNS = [f.name for f in fields(RunRecord)]


class RunRegistry:
    def __init__(self, path: Path):
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=10)
        connection.execute(
            "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, record TEXT NOT NULL)"
        )
        return connection

    def add(self, record: RunRecord) -> None:
        self.reserve(record)

    def reserve(
        self, record: RunRecord, check_spend: Callable[[float], None] | None = None
    ) -> None:
        """Insert the run, after `check_spend(this month's committed spend)` has not raised,
        in one write transaction: two launches cannot both pass a cap that fits one."""
        with closing(self._connect()) as db:
            db.isolation_level = None  # we open the transaction ourselves
            db.execute("BEGIN IMMEDIATE")  # the write lock, before the spend is read
            try:
                if check_spend is not None:
                    rows = db.execute("SELECT record FROM runs").fetchall()
                    check_spend(committed_in_month(RunRecord(**json.loads(r[0])) for r in rows))
                db.execute(
                    "INSERT INTO runs VALUES (?, ?)", (record.run_id, json.dumps(asdict(record)))
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def update(self, run_id: str, **changes) -> RunRecord:
        record = self.get(run_id)
        for key, value in changes.items():
            if key not in _COLUMNS:
                raise KeyError(key)
            setattr(record, key, value)
        with self._connect() as db:
            db.execute(
                "UPDATE runs SET record = ? WHERE run_id = ?", (json.dumps(asdict(record)), run_id)
            )
        return record

    def find(self, run_id: str) -> RunRecord | None:
        if not self.path.exists():
            return None
        with self._connect() as db:
            row = db.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return RunRecord(**json.loads(row[0])) if row else None

    def get(self, run_id: str) -> RunRecord:
        record = self.find(run_id)
        if record is None:
            raise NotFoundError(f"no run {run_id} in the registry {self.path}; see `bench status`")
        return record

    def all(self) -> list[RunRecord]:
        if not self.path.exists():
            return []
        with self._connect() as db:
            rows = db.execute("SELECT record FROM runs ORDER BY run_id").fetchall()
        return [RunRecord(**json.loads(r[0])) for r in rows]

    def sweep_members(self, sweep_id: str) -> list[RunRecord]:
        return [r for r in self.all() if r.sweep_id == sweep_id]

    def past_phase_seconds(self, plan: str, backend: str, gpu: str = "") -> list[dict[str, float]]:
        """Phase times of earlier complete, fetched runs of this plan on this backend and
        GPU type (a sweep's gpus.toml key; "" for runs of the configured machine)."""
        return [
            r.phase_seconds
            for r in self.all()
            if (r.plan, r.backend, r.gpu) == (plan, backend, gpu)
            and r.state == "complete"
            and r.phase_seconds
        ]

    def committed_this_month(self, now: datetime | None = None) -> float:
        return committed_in_month(self.all(), now)


def committed_in_month(records: Iterable[RunRecord], now: datetime | None = None) -> float:
    """Spend of this month's runs: actual cost when known, else the whole budget (so a run
    still launching holds its budget)."""
    now = now or datetime.now(timezone.utc)
    total = 0.0
    for record in records:
        created = record.created
        if (created.year, created.month) != (now.year, now.month):
            continue
        if record.backend == "local":
            continue
        total += record.cost_usd if record.cost_usd is not None else record.budget_usd
    return total
