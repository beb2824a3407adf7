"""The run registry on real SQLite: columns, indices, one-transaction updates, and files
written in the old one-JSON-blob-per-row format."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import asdict, fields

import pytest

from orchestrator import registry as registry_module
from orchestrator.backends.registry import billed
from orchestrator.errors import NotFoundError
from orchestrator.registry import RunRecord, RunRegistry
from tests.limits import HANG_SECONDS


def _record(run_id: str, **overrides) -> RunRecord:
    values = dict(
        run_id=run_id,
        backend="gce",
        plan="default",
        budget_usd=2.0,
        rate_usd_per_hour=0.5,
        max_run_seconds=3600,
        estimated_seconds=600,
        created_at="2026-11-23T06:00:00+00:00",
    )
    values.update(overrides)
    return RunRecord(**values)


def _columns(path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [row[1] for row in db.execute("PRAGMA table_info(runs)")]


def _indexed_columns(path) -> set[str]:
    with sqlite3.connect(path) as db:
        names = [row[1] for row in db.execute("PRAGMA index_list(runs)")]
        return {row[2] for name in names for row in db.execute(f"PRAGMA index_info({name})")}


def test_each_field_is_a_column_and_filters_are_indexed(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(_record("20261123-060000-aaaaaa"))
    assert _columns(registry.path) == [f.name for f in fields(RunRecord)] + ["created_month"]
    assert {"state", "plan", "backend", "created_month", "sweep_id"} <= _indexed_columns(
        registry.path
    )


@pytest.mark.parametrize(
    ("sql", "parameters", "index"),
    [
        (registry_module.COMMITTED_SQL.format(billed="?"), ("2026-11", "gce"), "runs_month"),
        (registry_module.PAST_PHASES_SQL, ("default", "gce", ""), "runs_plan"),
        (registry_module.SWEEP_SQL, ("sweep-1",), "runs_sweep"),
    ],
)
def test_queries_use_their_index(tmp_path, sql, parameters, index):
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(_record("20261123-060000-aaaaaa"))
    with sqlite3.connect(registry.path) as db:
        plan = " ".join(row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", parameters))
    assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan


def test_a_record_round_trips_with_its_types(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite")
    record = _record(
        "20261123-060000-aaaaaa",
        attempts=["us-central1-a", "europe-west4-b"],
        spot=False,
        phase_seconds={"build": 12.5},
        cost_usd=0.25,
        finished_at="2026-11-23T06:10:00+00:00",
        sweep_id="sweep-20261123-060000-bbbbbb",
        gpu="h100",
    )
    registry.add(record)
    assert registry.get(record.run_id) == record
    assert registry.get(record.run_id).spot is False


def test_committed_spend_is_this_months_non_local_runs_in_utc(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite", billed_backends=billed())
    registry.add(_record("a", budget_usd=2.0))  # launching: holds its budget
    registry.add(_record("b", budget_usd=5.0, cost_usd=0.5))  # finished: its cost
    registry.add(_record("c", backend="local", budget_usd=9.0))
    registry.add(_record("d", created_at="2026-10-31T23:00:00+00:00"))
    # 01:30 on Dec 1st at +03:00 is still November in UTC.
    registry.add(_record("e", budget_usd=1.0, created_at="2026-12-01T01:30:00+03:00"))
    from datetime import datetime, timezone

    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    assert registry.committed_this_month(now) == pytest.approx(3.5)
    assert RunRegistry(tmp_path / "none.sqlite", billed()).committed_this_month(now) == 0.0


def test_update_changes_only_the_named_fields_and_returns_the_record(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(_record("a", attempts=["z1"]))
    updated = registry.update("a", state="complete", phase_seconds={"run": 3.0}, spot=False)
    assert updated == registry.get("a")
    assert (updated.state, updated.phase_seconds, updated.spot, updated.attempts) == (
        "complete",
        {"run": 3.0},
        False,
        ["z1"],
    )
    with pytest.raises(KeyError):
        registry.update("a", colour="red")
    with pytest.raises(NotFoundError):
        registry.update("missing", state="failed")


@pytest.mark.slow
def test_concurrent_updates_of_different_fields_both_land(tmp_path):
    """A writer holds the lock while `update` starts: a read-then-write update would read
    the row before that writer commits and then write the stale cost back."""
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(_record("a"))
    holder = sqlite3.connect(registry.path, isolation_level=None, timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE runs SET cost_usd = 0.75 WHERE run_id = 'a'")
    worker = threading.Thread(target=registry.update, args=("a",), kwargs={"state": "complete"})
    worker.start()
    time.sleep(0.5)  # the update is now waiting on the lock (or has read, if it reads first)
    holder.execute("COMMIT")
    holder.close()
    worker.join(timeout=HANG_SECONDS)
    record = registry.get("a")
    assert (record.state, record.cost_usd) == ("complete", 0.75)


def _write_blob_registry(path, records: list[dict]) -> None:
    """The registry format before columns: one JSON object per row."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
        for record in records:
            db.execute("INSERT INTO runs VALUES (?, ?)", (record["run_id"], json.dumps(record)))


def test_a_blob_registry_is_migrated_on_open(tmp_path):
    path = tmp_path / "runs.sqlite"
    complete = asdict(
        _record(
            "20261122-080000-aaaaaa",
            state="complete",
            cost_usd=0.4,
            phase_seconds={"build": 30.0},
            plan_sha256="f" * 64,
            attempts=["us-central1-a"],
        )
    )
    # Written before sweeps existed: no sweep_id or gpu key.
    old = {k: v for k, v in asdict(_record("20261122-070000-bbbbbb")).items()}
    del old["sweep_id"], old["gpu"]
    _write_blob_registry(path, [complete, old])

    registry = RunRegistry(path, billed_backends=billed())
    assert [asdict(r) for r in registry.all()] == [
        {**old, "sweep_id": "", "gpu": ""},
        complete,
    ]
    assert _columns(path)[: len(fields(RunRecord))] == [f.name for f in fields(RunRecord)]
    assert registry.past_phase_seconds("f" * 64, "gce") == [{"build": 30.0}]
    from datetime import datetime, timezone

    assert registry.committed_this_month(datetime(2026, 11, 23, tzinfo=timezone.utc)) == 2.4
    registry.update("20261122-070000-bbbbbb", state="failed")
    assert RunRegistry(path).get("20261122-070000-bbbbbb").state == "failed"


def test_a_field_added_to_runrecord_becomes_a_column_with_its_default(tmp_path):
    """A registry written by an older version with columns gets the new columns."""
    path = tmp_path / "runs.sqlite"
    RunRegistry(path).add(_record("a", gpu="t4"))
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX runs_plan")
        db.execute("ALTER TABLE runs DROP COLUMN gpu")
        db.execute("PRAGMA user_version = 1")
    assert RunRegistry(path).get("a").gpu == ""


def test_the_estimates_error_comes_from_past_runs_of_the_same_plan_here(tmp_path):
    """Launch states how far its estimate may be off: each past complete run of the same
    plan content on this backend and GPU type, the time its phases took over its estimate."""
    from orchestrator.runtime_model import PhaseFigure, RuntimeEstimate, with_past_error

    registry = RunRegistry(tmp_path / "runs.sqlite")
    took = {
        "20261123-060000-aaaaa0": {"build": 30.0, "benchmark": 20.0},
        "20261123-060001-aaaaa1": {"benchmark": 30.0},
    }
    for run_id, phases in took.items():
        registry.add(_record(run_id, estimated_seconds=20))
        registry.update(
            run_id,
            state="complete",
            phase_seconds=phases,
            plan_sha256="p" * 64,
        )
    registry.add(_record("20261123-060009-bbbbbb", estimated_seconds=20))  # never fetched
    past = registry.past_estimates("p" * 64, "gce")
    assert past == [(20, 50.0), (20, 30.0)]
    assert registry.past_estimates("p" * 64, "local") == []

    model = RuntimeEstimate((PhaseFigure("benchmark", 20.0, "model"),))
    note = with_past_error(model, past).error_note()
    assert note == "2 past runs of this plan here took 1.50x-2.50x their estimates"
    assert "error unknown" in with_past_error(model, []).error_note()
