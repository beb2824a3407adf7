"""A Batch run's VM is contained as a gce run's is (docs/security.md): its token is the job's
service account, checked by the same bucket IAM proxy (tests/fakes/gcs_proxy.py) and, for
Batch's own API, by the Batch stand-in against the project's policy. The attack of
test_hostile_vm.py runs as the Batch task's python3, told a finished run's keys and job name
(every name is public), and tries every read, write and delete of theirs, with its token and
with its own run's grants bent to their keys, and reads and deletes their job. All are
refused, their objects are byte-identical after, and no grant of a run shows in its job's
name, labels, status events or task output."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import main
from tests.e2e.test_batch_run import job_id_of, launch
from tests.e2e.test_gce_cli import launched_run_id, plan_file
from tests.e2e.test_hostile_vm import (
    ATTACK,
    REFUSED_ON_ANOTHER_RUN,
    _attacker,
    _objects,
    _report,
)
from tests.fakes import batch_fixtures

pytestmark = pytest.mark.timeout(300)

batch_server = batch_fixtures.batch_server
batch = batch_fixtures.batch

# The attack, and Batch's API: the victim's job read and deleted with the VM's token.
BATCH_ATTACK = ATTACK.replace(
    '    cache=$(_gce_urlencode "$PREFIX/cache/kernels/any")\n',
    '    jobs="$BENCH_BATCH_ENDPOINT/v1/projects/$BENCH_PROJECT/locations/us-central1/jobs"\n'
    "    for job in $VICTIM_JOBS; do\n"
    '      echo "read-job $job $(code "$jobs/$job")"\n'
    '      echo "delete-job $job $(code -X DELETE "$jobs/$job")"\n'
    "    done\n"
    '    cache=$(_gce_urlencode "$PREFIX/cache/kernels/any")\n',
)


def _grants_in(job_body: dict) -> list[str]:
    """The signatures of a run's grants, as its job's script holds them."""
    (runnable,) = job_body["taskGroups"][0]["taskSpec"]["runnables"]
    text = runnable["script"]["text"]
    found = re.findall(r"X-Goog-Signature=([0-9a-f]{64,})", text)
    found += re.findall(r"RUN_UPLOAD_FIELD_x_goog_signature=\W*([0-9a-f]{64,})", text)
    assert found, "no signed grant in the job's script"
    return found


def test_a_hostile_batch_vm_that_knows_every_name_touches_nothing_but_its_own_run(
    batch, gcs_server, gcs_bucket, tmp_path, capsys
):
    plan = plan_file(tmp_path)
    assert main(launch("--budget", "1.00", "--plan", plan, "--wait")) == 0, capsys.readouterr()
    victim = launched_run_id(capsys)
    victim_key, victim_job = f"runs/{victim}", job_id_of(batch, victim)
    before = _objects(gcs_server, gcs_bucket, f"bench/{victim_key}/")
    assert f"bench/{victim_key}/manifest.json" in before

    # No grant of the victim's run shows where anyone may read: its job's name and labels,
    # Batch's status events, the task's output (Cloud Logging), `bench logs`.
    grants = _grants_in(batch.created[0])
    job = batch.job_by_id(victim_job)
    assert main(["logs", victim]) == 0
    shown = "\n".join(
        [job.name, *job.body["labels"].values(), *job.log, capsys.readouterr().out]
        + [event["description"] for event in job.events + job.task_events]
    )
    assert [grant for grant in grants if grant in shown] == []

    path, env = _attacker(tmp_path, [victim_key])
    batch.vm_path = [path, *batch.vm_path]
    batch.vm_env = {**batch.vm_env, **env, "VICTIM_JOBS": victim_job}
    (tmp_path / "hostile-bin" / "python3").write_text(BATCH_ATTACK)
    assert main(launch("--budget", "1.00", "--plan", plan, "--wait")) == 0, capsys.readouterr()
    hostile = launched_run_id(capsys)

    report = _report(tmp_path)
    attempts = {what: code for (what, on), code in report.items() if on == victim_key}
    assert attempts == REFUSED_ON_ANOTHER_RUN  # the job's account: as a gce VM's
    assert report[("list-runs", "-")] == "403" and report[("list-all", "-")] == "403"
    assert report[("plant-cache-digest", "-")] == "403"
    assert report[("plant-cache-tarball", "-")] == "403"
    # Batch's API: the job's account holds no batch.jobs.get or .delete.
    assert report[("read-job", victim_job)] == "403"
    assert report[("delete-job", victim_job)] == "403"
    account = f"serviceAccount:bench-vm@{batch.project}.iam.gserviceaccount.com"
    assert {(who, what) for who, what, _ in batch.denied} == {
        (account, "batch.jobs.get"),
        (account, "batch.jobs.delete"),
    }
    # The token was the job's account, refused by IAM (its cloud-platform scope lets every
    # call through to IAM), not taken for the controller.
    token_denied = [d for d in batch.bucket_proxy.denied if d[0] == account.split(":")[1]]
    assert len(token_denied) == 9
    assert _objects(gcs_server, gcs_bucket, f"bench/{victim_key}/") == before
    assert not list(gcs_server.client().list_blobs(gcs_bucket, prefix="bench/cache/"))
    assert main(["fetch", victim, "--dest", str(tmp_path / "r")]) == 0
    assert main(["fetch", hostile, "--dest", str(tmp_path / "r")]) == 0


def test_a_batch_job_needs_its_rights_and_act_as_on_its_account(batch, tmp_path, capsys):
    """The Batch stand-in checks IAM as the compute one does: a launcher with
    roles/batch.jobsEditor but not roles/iam.serviceAccountUser on the job's account is
    refused (https://cloud.google.com/batch/docs/create-run-job-custom-service-account), and
    nothing is created."""
    me = "user:bench-user@example.com"
    batch.iam.policies[batch.project] = {
        "version": 1,
        "bindings": [{"role": "roles/batch.jobsEditor", "members": [me]}],
    }
    plan = plan_file(tmp_path)
    assert main(launch("--budget", "1.00", "--plan", plan)) != 0
    err = capsys.readouterr().err
    assert "iam.serviceAccounts.actAs" in err, err
    assert batch.created == [] and batch.jobs == {}
    assert [what for _, what, _ in batch.denied] == ["iam.serviceAccounts.actAs"]
