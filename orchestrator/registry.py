"""The local run registry: one SQLite row per launched run.

The cloud is the truth about machines (stop-all needs no local state); the registry is
how `status`, `fetch --all`, the monthly cap and runtime estimates find past runs.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable, Collection
from contextlib import closing, contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.errors import NotFoundError, RegistryLockedError
from results_schema.names import run_key

FINISHED_STATES = ("complete", "partial", "failed", "stopped")
# A run launched or stopped whose results nobody fetched yet: fetch sets the manifest's state.
AWAITING_FETCH_STATES = ("running", "stopped")


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
    # The sha256 of the payload launch built (from the spec); fetch reads the launched plan
    # back from it. "" for a run from before it was kept.
    payload_sha256: str = ""
    # That plan's content key (runtime_model.history_key: Plan.content_sha256 less a user
    # kernel's tree), set by fetch from the verified payload: phase times are history only
    # for launches of the same content, whatever its name.
    plan_sha256: str = ""
    # A sweep (`launch --gpu a,b`) groups its members; gpu is the gpus.toml key.
    sweep_id: str = ""
    gpu: str = ""
    # The secret a run launched before issue 50 had in its key and instance name; "" for
    # every other run (names are public now: results_schema/names.py).
    run_secret: str = ""
    # Whether fetch may promote the run's cache candidates into the shared cache.
    cache_trusted: bool = False
    # When `bench clean` deleted the run's files here (ISO time; "" while they remain).
    cleaned_at: str = ""

    @property
    def run_key(self) -> str:
        return run_key(self.run_id, self.run_secret)

    @property
    def created(self) -> datetime:
        return datetime.fromisoformat(self.created_at)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def awaiting_fetch(self) -> bool:
        return self.state in AWAITING_FETCH_STATES


# The table's columns are RunRecord's fields; lists and dicts are JSON text in their column,
# a bool is 0/1. created_month (UTC "YYYY-MM") is derived on write so the monthly cap's
# query can use an index whatever offset created_at was written with.
_COLUMNS = [f.name for f in fields(RunRecord)]
_JSON_COLUMNS = {"attempts", "phase_seconds"}
_BOOL_COLUMNS = [f.name for f in fields(RunRecord) if f.type == "bool"]
_SQL_TYPES = {"str": "TEXT", "float": "REAL", "int": "INTEGER", "bool": "INTEGER"}
_INDEXES = {
    "runs_state": "state",
    "runs_plan": "plan, backend, gpu, state",
    "runs_plan_content": "plan_sha256",
    "runs_month": "created_month, backend",
    "runs_sweep": "sweep_id",
}


def _column_sql(f) -> str:
    base = f.type.split(" | ")[0]
    nullable = f.type.endswith("| None")
    sql_type = _SQL_TYPES.get(base, "TEXT")  # list[...] and dict[...] are JSON text
    return f"{f.name} {sql_type}" + ("" if nullable else " NOT NULL")


def _default_sql(f) -> str:
    """A literal for ALTER TABLE ADD COLUMN, so a field added later fills old rows."""
    if f.default_factory is not MISSING:
        return _sql_literal(_encode(f.name, f.default_factory()))
    if f.default is not MISSING:
        return _sql_literal(_encode(f.name, f.default))
    return "''"


def _sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


_TABLE_SQL = (
    "CREATE TABLE runs ("
    + ", ".join(
        ["run_id TEXT PRIMARY KEY"]
        + [_column_sql(f) for f in fields(RunRecord) if f.name != "run_id"]
        + ["created_month TEXT NOT NULL"]
    )
    + ")"
)
# PRAGMA user_version names the schema this file holds; a changed RunRecord changes it.
_SCHEMA_VERSION = zlib.crc32(_TABLE_SQL.encode()) & 0x7FFFFFFF

_SELECT_RECORD = f"SELECT {', '.join(_COLUMNS)} FROM runs"
# ... AND backend IN (one ? per backend whose runs are billed: Capabilities.billed)
COMMITTED_SQL = (
    "SELECT COALESCE(SUM(COALESCE(cost_usd, budget_usd)), 0.0) FROM runs"
    " WHERE created_month = ? AND backend IN ({billed})"
)
PAST_PHASES_SQL = (
    "SELECT phase_seconds FROM runs WHERE plan_sha256 = ? AND backend = ? AND gpu = ?"
    " AND state = 'complete' AND phase_seconds != '{}' ORDER BY run_id"
)
PAST_ESTIMATES_SQL = (
    "SELECT estimated_seconds, phase_seconds FROM runs WHERE plan_sha256 = ? AND backend = ?"
    " AND gpu = ? AND state = 'complete' AND phase_seconds != '{}' ORDER BY run_id"
)
SWEEP_SQL = f"{_SELECT_RECORD} WHERE sweep_id = ? ORDER BY run_id"


def _encode(name: str, value):
    if name in _JSON_COLUMNS:
        return json.dumps(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _month(created_at: str) -> str:
    created = datetime.fromisoformat(created_at)
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return created.astimezone(timezone.utc).strftime("%Y-%m")


def _row_values(record: RunRecord) -> list:
    values = [_encode(name, value) for name, value in asdict(record).items()]
    return [*values, _month(record.created_at)]


def _record(row: sqlite3.Row | tuple) -> RunRecord:
    values = dict(zip(_COLUMNS, row, strict=True))
    for name in _JSON_COLUMNS:
        values[name] = json.loads(values[name])
    for name in _BOOL_COLUMNS:
        values[name] = bool(values[name])
    return RunRecord(**values)


# How long a command waits for another bench process's transaction before it gives up.
LOCK_WAIT_SECONDS = 10.0


class _Connection(sqlite3.Connection):
    """A connection whose "database is locked" is a RegistryLockedError: one line that says
    which file and what to do, not a traceback."""

    def __init__(self, database, *args, **kwargs):
        super().__init__(database, *args, **kwargs)
        self.registry_path = database

    def execute(self, sql, parameters=()):
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as error:
            if not _is_locked(error):
                raise
            raise RegistryLockedError(
                f"the run registry {self.registry_path} stayed locked by another bench "
                f"process for {LOCK_WAIT_SECONDS:g} s; nothing was read or written: retry "
                "when it is done, or give this one its own BENCH_STATE_DIR"
            ) from None


def _is_locked(error: sqlite3.OperationalError) -> bool:
    # SQLITE_BUSY / SQLITE_LOCKED; Python 3.10 has no error codes on the exception.
    return str(error).startswith(("database is locked", "database table is locked"))


class RunRegistry:
    def __init__(self, path: Path, billed_backends: Collection[str] = ()):
        """`billed_backends`: the backends whose runs count against the monthly cap (the
        service's Context passes those whose Capabilities say billed); none by default."""
        self.path = path
        self.billed_backends = tuple(billed_backends)

    def _connect(self) -> sqlite3.Connection:
        """A connection in autocommit mode (each write opens its own transaction), to a
        file whose schema is this code's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self.path, timeout=LOCK_WAIT_SECONDS, isolation_level=None, factory=_Connection
        )
        try:
            if connection.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA_VERSION:
                with _write_transaction(connection):
                    _migrate(connection)
        except BaseException:
            connection.close()  # a locked file: let go of it before saying so
            raise
        return connection

    def add(self, record: RunRecord) -> None:
        self.reserve(record)

    def reserve(
        self, record: RunRecord, check_spend: Callable[[float], None] | None = None
    ) -> None:
        """Insert the run, after `check_spend(this month's committed spend)` has not raised,
        in one write transaction: two launches cannot both pass a cap that fits one."""
        with closing(self._connect()) as db, _write_transaction(db):
            if check_spend is not None:
                check_spend(_committed(db, datetime.now(timezone.utc), self.billed_backends))
            db.execute(_INSERT_SQL, _row_values(record))

    def update(self, run_id: str, **changes) -> RunRecord:
        """Set the named fields of one run and return it, in one write transaction: two
        concurrent updates of different fields both land."""
        unknown = [key for key in changes if key not in _COLUMNS or key == "run_id"]
        if unknown:
            raise KeyError(", ".join(unknown))
        values = [_encode(key, value) for key, value in changes.items()]
        assignments = [f"{key} = ?" for key in changes]
        if "created_at" in changes:
            assignments.append("created_month = ?")
            values.append(_month(changes["created_at"]))
        with closing(self._connect()) as db, _write_transaction(db):
            if assignments:
                db.execute(
                    f"UPDATE runs SET {', '.join(assignments)} WHERE run_id = ?",
                    [*values, run_id],
                )
            row = db.execute(f"{_SELECT_RECORD} WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise self._not_found(run_id)
        return _record(row)

    def find(self, run_id: str) -> RunRecord | None:
        if not self.path.exists():
            return None
        with closing(self._connect()) as db:
            row = db.execute(f"{_SELECT_RECORD} WHERE run_id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def get(self, run_id: str) -> RunRecord:
        record = self.find(run_id)
        if record is None:
            raise self._not_found(run_id)
        return record

    def _not_found(self, run_id: str) -> NotFoundError:
        return NotFoundError(f"no run {run_id} in the registry {self.path}; see `bench status`")

    def all(self) -> list[RunRecord]:
        return self._records(f"{_SELECT_RECORD} ORDER BY run_id")

    def sweep_members(self, sweep_id: str) -> list[RunRecord]:
        return self._records(SWEEP_SQL, (sweep_id,))

    def _records(self, sql: str, parameters: tuple = ()) -> list[RunRecord]:
        if not self.path.exists():
            return []
        with closing(self._connect()) as db:
            return [_record(row) for row in db.execute(sql, parameters)]

    def past_phase_seconds(
        self, plan_sha256: str, backend: str, gpu: str = ""
    ) -> list[dict[str, float]]:
        """Phase times of earlier complete, fetched runs of a plan of this content
        (Plan.content_sha256, never its name) on this backend and GPU type (a sweep's
        gpus.toml key; "" for runs of the configured machine)."""
        if not plan_sha256 or not self.path.exists():
            return []
        with closing(self._connect()) as db:
            rows = db.execute(PAST_PHASES_SQL, (plan_sha256, backend, gpu)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def past_estimates(
        self, plan_sha256: str, backend: str, gpu: str = ""
    ) -> list[tuple[int, float]]:
        """(estimated seconds, seconds its phases took) of the same runs as
        past_phase_seconds: how far launch's estimate was from what happened."""
        if not plan_sha256 or not self.path.exists():
            return []
        with closing(self._connect()) as db:
            rows = db.execute(PAST_ESTIMATES_SQL, (plan_sha256, backend, gpu)).fetchall()
        return [(int(estimated), sum(json.loads(phases).values())) for estimated, phases in rows]

    def committed_this_month(self, now: datetime | None = None) -> float:
        if not self.path.exists():
            return 0.0
        with closing(self._connect()) as db:
            return _committed(db, now or datetime.now(timezone.utc), self.billed_backends)


_INSERT_SQL = (
    f"INSERT INTO runs ({', '.join(_COLUMNS)}, created_month)"
    f" VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})"
)


def _committed(db: sqlite3.Connection, now: datetime, billed: tuple[str, ...]) -> float:
    """Spend of this month's runs: actual cost when known, else the whole budget (so a run
    still launching holds its budget). Runs of an unbilled backend (local) cost nothing."""
    month = now.astimezone(timezone.utc).strftime("%Y-%m")
    sql = COMMITTED_SQL.format(billed=", ".join("?" * len(billed)) or "NULL")
    return float(db.execute(sql, (month, *billed)).fetchone()[0])


@contextmanager
def _write_transaction(db: sqlite3.Connection):
    """BEGIN IMMEDIATE takes the write lock before anything is read, so what the
    transaction reads is still true when it writes."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the file to this code's schema, inside the caller's write transaction: create
    it, convert the one-JSON-blob-per-row format, or add columns of fields added since."""
    if db.execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION:
        return  # another process migrated it while we waited for the lock
    existing = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    if existing == ["run_id", "record"]:
        blobs = db.execute("SELECT record FROM runs ORDER BY run_id").fetchall()
        db.execute("ALTER TABLE runs RENAME TO runs_blob")
        db.execute(_TABLE_SQL)
        for (blob,) in blobs:
            stored = json.loads(blob)
            record = RunRecord(**{k: v for k, v in stored.items() if k in _COLUMNS})
            db.execute(_INSERT_SQL, _row_values(record))
        db.execute("DROP TABLE runs_blob")
    elif not existing:
        db.execute(_TABLE_SQL)
    else:
        for f in fields(RunRecord):
            if f.name not in existing:
                db.execute(
                    f"ALTER TABLE runs ADD COLUMN {_column_sql(f)} DEFAULT {_default_sql(f)}"
                )
    for name, columns in _INDEXES.items():
        db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON runs ({columns})")
    db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
