"""A Batch job's life beyond one run: stop-all across regions (and a deletion that fails),
a job that waits for capacity past its deadline, and the service layer seeing the batch
backend only through its protocols."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.backends import names
from orchestrator.backends import registry as backends
from orchestrator.backends.base import Backend
from orchestrator.backends.batch.backend import BatchBackend
from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from tests.e2e.test_backend_protocol import ProtocolOnly
from tests.e2e.test_batch_run import (
    assert_the_run_completes_fetches_and_its_job_fits_the_discovery_document,
    job_id_of,
    launch,
)
from tests.e2e.test_gce_cli import launched_run_id, plan_file
from tests.fakes import batch_fixtures

pytestmark = pytest.mark.timeout(300)

batch_server = batch_fixtures.batch_server
batch = batch_fixtures.batch


def launch_in(region_zone: str, plan: str, capsys, monkeypatch, **settings: str) -> str:
    monkeypatch.setenv("BENCH_ZONES", region_zone)
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    assert main(launch("--budget", "1.00", "--plan", plan)) == 0, capsys.readouterr()
    return launched_run_id(capsys)


def test_stop_all_deletes_running_and_queued_jobs_in_every_region_and_names_a_failure(
    batch, tmp_path, capsys, monkeypatch
):
    plan = plan_file(tmp_path)
    batch.script_override = "sleep 300"  # tasks that run until deleted
    batch.stockout("europe-west4")
    running = launch_in("us-central1-a", plan, capsys, monkeypatch)
    stuck = launch_in("us-central1-b", plan, capsys, monkeypatch)
    queued = launch_in(
        "europe-west4-a",
        plan,
        capsys,
        monkeypatch,
        MACHINE_TYPE="n1-standard-4",
        ACCELERATOR_TYPE="nvidia-tesla-t4",
    )
    batch.wait_for_state(job_id_of(batch, running), ("RUNNING",))
    batch.wait_for_state(job_id_of(batch, stuck), ("RUNNING",))
    assert batch.job_by_id(job_id_of(batch, queued)).state == "QUEUED"
    batch.fail_delete(job_id_of(batch, stuck))
    capsys.readouterr()
    assert main(["stop-all", "--yes"]) == 4
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert job_id_of(batch, stuck) in shown  # the deletion that failed, named
    left = [name.rsplit("/", 1)[-1] for name in batch.jobs]
    assert left == [job_id_of(batch, stuck)], "the running and the queued job were deleted"
    deletes = [p for verb, p in batch.requests if verb == "DELETE"]
    assert any("/locations/europe-west4/" in p for p in deletes)
    assert any("/locations/us-central1/" in p for p in deletes)


def test_a_job_queued_past_its_deadline_is_deleted_and_its_share_released(
    batch, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("BENCH_BATCH_QUEUE_MINUTES", str(1 / 60))  # one second
    batch.stockout("us-central1")
    plan = plan_file(tmp_path)
    assert main(launch("--budget", "1.00", "--plan", plan)) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    registry = RunRegistry(tmp_path / "state" / "runs.sqlite", billed_backends=backends.billed())
    assert registry.committed_this_month() == pytest.approx(1.00)  # held while queued
    time.sleep(1.5)
    assert main(["status", run_id, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["state"] == "failed"
    assert "waiting for capacity" in shown["reason"]
    assert batch.jobs == {}, "the queued job was deleted"
    assert registry.committed_this_month() == 0.0  # its share no longer holds the cap


class ProtocolOnlyBatch(BatchBackend):
    @classmethod
    def create(cls, host):
        return ProtocolOnly(BatchBackend.create(host), Backend)


def test_a_batch_run_needs_only_what_the_protocols_declare(
    batch, gcs_server, gcs_bucket, tmp_path, capsys, monkeypatch
):
    """A whole batch run through the service seeing the backend only through its protocols:
    launched, waited for, checked as tests/e2e/test_batch_run.py checks a batch run (its
    job, its fetch), then each command on it."""
    monkeypatch.setattr(
        names, "BACKENDS", {**names.BACKENDS, "batch": f"{__name__}:ProtocolOnlyBatch"}
    )
    backends.backend_class.cache_clear()
    try:
        plan = plan_file(tmp_path)
        assert main(launch("--budget", "1.00", "--plan", plan, "--wait")) == 0, capsys.readouterr()
        run_id = launched_run_id(capsys)
        assert_the_run_completes_fetches_and_its_job_fits_the_discovery_document(
            batch, gcs_server, gcs_bucket, tmp_path, capsys, run_id
        )
        for command in (
            ["status"],
            ["logs", run_id],
            ["fetch", run_id, "--dest", str(tmp_path / "results")],
            ["render", "--backend", "batch", "--plan", plan],
            ["stop-all", "--yes"],
        ):
            assert main(command) == 0, (command, capsys.readouterr())
    finally:
        backends.backend_class.cache_clear()


def test_doctor_says_whether_the_batch_api_answers_and_how_to_enable_it(batch):
    from orchestrator.config import BenchConfig

    backend = BatchBackend(BenchConfig(project=batch.project, batch_endpoint=batch.endpoint))
    first = next(iter(backend.doctor_checks(None, probe=False)))  # IAM's: test_batch_project
    assert first.name == "Batch API" and first.ok
    batch.api_disabled = True
    (check,) = list(backend.doctor_checks(None, probe=False))
    assert not check.ok
    assert check.fix.startswith("gcloud services enable batch.googleapis.com")
    # An API never enabled holds no job: stop-all finds nothing there rather than failing.
    assert backend.list_machines() == []


def test_the_launchs_queue_deadline_travels_with_its_job(batch, tmp_path, capsys, monkeypatch):
    """--queue-minutes (issue 33 item 2): the job carries its deadline on a label, so a
    later `bench status` whose settings say otherwise still deletes it on the launch's terms."""
    batch.stockout("us-central1")
    plan = plan_file(tmp_path)
    args = launch("--budget", "1.00", "--plan", plan, "--queue-minutes", "2")
    assert main(args) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    (job,) = batch.jobs.values()
    assert job.body["labels"]["bench-queue-seconds"] == "120"
    monkeypatch.setenv("BENCH_BATCH_QUEUE_MINUTES", str(1 / 60))  # this machine's: a second
    time.sleep(1.5)
    assert main(["status", run_id, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["state"] == "waiting for capacity" and len(batch.jobs) == 1
    # A deadline below a minute is refused as a flag (bench.toml may still set one).
    assert main(launch("--budget", "1.00", "--plan", plan, "--queue-minutes", "0.5")) == 2
    assert "--queue-minutes" in capsys.readouterr().err
