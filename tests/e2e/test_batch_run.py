"""`--backend batch` end to end: the real CLI and the real google-cloud-batch client (REST)
against the Batch stand-in (tests/fakes/batch_server.py: every request and answer checked
against the batch v1 discovery document), the real fake-gcs-server, and the same rendered
startup script a gce VM runs."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.backends.batch.money import attempt_usd
from orchestrator.backends.gce import pricing
from orchestrator.cli import main
from orchestrator.config import DEFAULT_IMAGE_FAMILY, BenchConfig
from orchestrator.registry import RunRegistry
from results_schema import Manifest
from results_schema.record import billed_usd
from tests.e2e.test_gce_cli import bucket_objects, launched_run_id, plan_file
from tests.e2e.test_sweep import sweep_id_of
from tests.fakes import batch_fixtures, batch_tasks, discovery

pytestmark = pytest.mark.timeout(300)


# The stand-in's fixtures (tests/fakes/batch_fixtures.py), for this module's tests.
batch_server = batch_fixtures.batch_server
batch = batch_fixtures.batch


def job_id_of(batch, run_id: str) -> str:
    # The job is named bench-<run id>, nothing more: every name is public (issue 50).
    (name,) = [n for n in batch.jobs if n.endswith(f"/jobs/bench-{run_id}")]
    return name.rsplit("/", 1)[-1]


def launch(*args: str) -> list[str]:
    return ["launch", "--backend", "batch", *args]


def assert_the_run_completes_fetches_and_its_job_fits_the_discovery_document(
    batch, gcs_server, gcs_bucket, tmp_path, capsys, run_id: str
) -> None:
    """A batch run of plan_file's plan launched with --budget 1.00 --wait: its one job's body
    fits the discovery document and asks what bench means it to, the run fetches complete
    with what the task's machine was, and its job ends SUCCEEDED. Checked on the run that
    tests/e2e/test_batch_lifecycle.py launches through the protocols alone (one batch run
    for both)."""
    (body,) = batch.created
    discovery.validate("batch", "v1", "Job", body)
    spec = body["taskGroups"][0]["taskSpec"]
    assert spec["lifecyclePolicies"] == [
        {"action": "RETRY_TASK", "actionCondition": {"exitCodes": [50001, 50006]}}
    ]
    policy = body["allocationPolicy"]["instances"][0]
    # The image brings its driver: Batch is asked to install none (proto3 JSON omits false).
    assert policy.get("installGpuDrivers", False) is False
    assert policy["policy"]["bootDisk"]["image"].endswith("/family/" + DEFAULT_IMAGE_FAMILY)
    # bench's own account, named with the storage-only scope (Batch adds cloud-platform).
    assert body["allocationPolicy"]["serviceAccount"] == {
        "email": f"bench-vm@{batch.project}.iam.gserviceaccount.com",
        "scopes": ["https://www.googleapis.com/auth/devstorage.read_only"],
    }
    assert policy["policy"]["provisioningModel"] == "SPOT"
    assert policy["policy"]["machineType"] == "g2-standard-4"
    assert policy["policy"]["accelerators"] == [{"type": "nvidia-l4", "count": "1"}]
    assert body["allocationPolicy"]["location"]["allowedLocations"] == [
        "zones/us-central1-a",
        "zones/us-central1-b",
        "zones/us-central1-c",
    ]
    assert body["labels"]["bench-managed"] == "true" and body["labels"]["bench-run"] == run_id
    assert body["logsPolicy"] == {"destination": "CLOUD_LOGGING"}
    # The money: every attempt, retries included, priced at the catalog rate fits the budget.
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    seconds = int(spec["maxRunDuration"].rstrip("s"))
    assert spec["maxRetryCount"] == 3
    assert (1 + spec["maxRetryCount"]) * attempt_usd(rate, seconds) <= 1.00
    assert main(["fetch", run_id, "--dest", str(tmp_path / "results")]) == 0
    assert "every sha256 verified" in capsys.readouterr().out
    manifest = Manifest.model_validate_json(
        (tmp_path / "results" / run_id / "manifest.json").read_text()
    )
    assert manifest.status == "complete"
    # What the task's machine was, from its metadata server as on a gce VM (the GPU's UUID,
    # driver and clocks come from NVML: tests/gpu/test_harness.py, on a GPU).
    environment = manifest.environment
    assert environment is not None
    assert (environment.zone, environment.machine_type, environment.spot) == (
        "us-central1-a",
        "g2-standard-4",
        True,
    )
    assert batch.wait_for_state(job_id_of(batch, run_id), ("FAILED", "SUCCEEDED")) == "SUCCEEDED"
    assert any(name.endswith("/manifest.json") for name in bucket_objects(gcs_server, gcs_bucket))


def test_a_preempted_task_is_retried_and_the_run_completes_within_the_budget(
    batch, tmp_path, capsys, monkeypatch
):
    plan = plan_file(tmp_path)
    real_create = batch.create
    # A task's exit is its job's news after its results are in the bucket (the script ends
    # after its last upload): here a second later, as on a loaded machine, where `--wait`
    # returned before the retry's exit was recorded and the test read one attempt.
    real_attempt = batch_tasks.TaskRunner._attempt

    def attempt_then_exit_late(runner, spec):
        code = real_attempt(runner, spec)
        time.sleep(1.0)
        return code

    monkeypatch.setattr(batch_tasks.TaskRunner, "_attempt", attempt_then_exit_late)

    def create_and_preempt(project, region, query, body):
        answer = real_create(project, region, query, body)
        batch.preempt(query["jobId"], after_s=1.0)  # the first attempt's VM, 1 s in
        return answer

    batch.create = create_and_preempt
    batch.preemption_grace_s = 5.0
    assert main(launch("--budget", "1.00", "--plan", plan, "--wait")) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    job_id = job_id_of(batch, run_id)
    assert batch.wait_for_state(job_id, ("FAILED", "SUCCEEDED")) == "SUCCEEDED"
    job = batch.job_by_id(job_id)
    assert job.attempts_exit_codes == [50001, 0]
    assert main(["fetch", run_id, "--dest", str(tmp_path / "results")]) == 0
    manifest = Manifest.model_validate_json(
        (tmp_path / "results" / run_id / "manifest.json").read_text()
    )
    assert manifest.status == "complete"  # the retry's manifest, not the preempted attempt's
    # Every attempt is priced, each for its time on its VM with the one-minute minimum (the
    # task's status events), not the run's life from launch; fetch records it, the fetched
    # manifest and `status` say it.
    record = RunRegistry(tmp_path / "state" / "runs.sqlite").get(run_id)
    assert len(job.vm_seconds) == 2
    every_attempt = sum(billed_usd(record.rate_usd_per_hour, s) for s in job.vm_seconds)
    assert record.cost_usd == pytest.approx(every_attempt, abs=1e-5)
    assert record.cost_usd >= 2 * billed_usd(record.rate_usd_per_hour, 60) - 1e-9
    assert manifest.cost is not None and manifest.cost.estimated_usd == record.cost_usd
    capsys.readouterr()
    assert main(["status", run_id, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["cost_usd"] == pytest.approx(record.cost_usd, abs=1e-6)
    spec = batch.created[0]["taskGroups"][0]["taskSpec"]
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    worst = (1 + spec["maxRetryCount"]) * attempt_usd(rate, int(spec["maxRunDuration"][:-1]))
    assert worst <= 1.00


def test_a_task_that_fails_is_not_retried_and_status_gives_batchs_reason(batch, tmp_path, capsys):
    batch.script_override = "exit 3"
    assert main(launch("--budget", "1.00", "--plan", plan_file(tmp_path))) == 0
    run_id = launched_run_id(capsys)
    job_id = job_id_of(batch, run_id)
    assert batch.wait_for_state(job_id, ("FAILED", "SUCCEEDED")) == "FAILED"
    assert batch.job_by_id(job_id).attempts_exit_codes == [3]  # 3 is not 50001 nor 50006
    capsys.readouterr()
    assert main(["status", run_id, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["state"] == "failed"
    assert "exit code 3" in shown["reason"]


def test_retries_the_budget_cannot_pay_for_are_not_configured_and_too_little_is_refused(
    batch, tmp_path, capsys
):
    plan = plan_file(tmp_path)
    batch.run_scripts = False
    assert main(launch("--budget", "0.50", "--plan", plan)) == 0, capsys.readouterr()
    spec = batch.created[0]["taskGroups"][0]["taskSpec"]
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    seconds = int(spec["maxRunDuration"][:-1])
    assert 0 < spec["maxRetryCount"] < 3
    assert (1 + spec["maxRetryCount"]) * attempt_usd(rate, seconds) <= 0.50
    # One more retry, even of the shortest attempt that covers the plan, would not fit.
    assert (2 + spec["maxRetryCount"]) * attempt_usd(rate, 60) > 0.50
    capsys.readouterr()
    assert main(launch("--budget", "0.10", "--plan", plan)) == 3
    err = capsys.readouterr().err
    assert "cannot pay for one Batch attempt" in err and "$" in err
    assert len(batch.created) == 1, "a refused launch creates nothing"


def test_a_sweep_of_l4_and_t4_completes_fetches_and_reports(batch, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    plan = plan_file(tmp_path)
    args = launch("--gpu", "l4,t4", "--budget", "2.00", "--plan", plan, "--wait")
    assert main(args) == 0, capsys.readouterr()
    sweep_id = sweep_id_of(capsys.readouterr().out)
    machines = sorted(
        b["allocationPolicy"]["instances"][0]["policy"]["machineType"] for b in batch.created
    )
    assert machines == ["g2-standard-4", "n1-standard-4"]
    for body in batch.created:
        discovery.validate("batch", "v1", "Job", body)
        assert body["labels"]["bench-sweep"] == sweep_id
    assert main(["fetch", sweep_id]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["report", sweep_id]) == 0
    out = capsys.readouterr().out
    assert f"sweep {sweep_id}" in out and "l4" in out.lower() and "t4" in out.lower()
