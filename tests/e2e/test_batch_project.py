"""Cloud Batch beside gce in the commands that speak of a whole project: `bench setup` grants
the job's VM account Batch's roles (printed first, then --apply against the IAM stand-in),
`bench doctor` runs gce's checks and then Batch's, `bench status` says a queued job waits for
capacity, and `bench prices` states the attempts a launch configures."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import main
from tests.e2e.test_batch_run import launch
from tests.e2e.test_gce_cli import launched_run_id, plan_file
from tests.e2e.test_gce_setup import ACCOUNT, PROJECT, iam  # noqa: F401 - fixture
from tests.fakes import batch_fixtures
from tests.fakes.iam_policy import CONTROLLER_MEMBER

pytestmark = pytest.mark.timeout(300)

batch_server = batch_fixtures.batch_server
batch = batch_fixtures.batch
# What a Batch job's service account needs on the project
# (https://cloud.google.com/batch/docs/get-started#project-prerequisites).
VM_ROLES = ("roles/batch.agentReporter", "roles/logging.logWriter")


@pytest.fixture
def batch_in_use(batch_server, monkeypatch):
    """`backend = "batch"` in the settings, its API the stand-in."""
    monkeypatch.setenv("BENCH_BACKEND", "batch")
    monkeypatch.setenv("BENCH_BATCH_ENDPOINT", batch_server.endpoint)
    return batch_server


def gcloud_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("gcloud ")]


def test_setup_prints_batchs_grants_after_gces_only_when_batch_is_in_use(
    bench_env, capsys, monkeypatch
):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup"]) == 0
    gce_only = gcloud_lines(capsys)
    assert not [line for line in gce_only if "roles/batch." in line]
    monkeypatch.setenv("BENCH_BACKEND", "batch")
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("gcloud ")]
    assert lines[: len(gce_only)] == gce_only  # gce's steps first: they create the account
    grants = lines[len(gce_only) :]
    assert grants == [
        f"gcloud projects add-iam-policy-binding {PROJECT} "
        f"--member=serviceAccount:{ACCOUNT} --role={role} --condition=None"
        for role in VM_ROLES
    ]
    # Who launches is named, with the narrowest grants (serviceAccountUser on one account).
    assert f"roles/iam.serviceAccountUser on {ACCOUNT} only" in out
    assert "roles/batch.jobsEditor" in out


def doctor_lines(capsys) -> tuple[int, list[str]]:
    code = main(["doctor"])
    captured = capsys.readouterr()
    assert code in (0, 4), captured.err
    return code, [line for line in captured.out.splitlines() if line[:1] in "✓✗"]


def test_setup_grants_batchs_roles_and_doctor_runs_gces_checks_then_batchs(
    iam,  # noqa: F811 - the fixture imported above
    batch_in_use,
    capsys,
    monkeypatch,
):
    assert main(["setup", "--apply"]) == 0
    member = f"serviceAccount:{ACCOUNT}"
    bindings = iam.policy(PROJECT)["bindings"]
    for role in VM_ROLES:
        (binding,) = [b for b in bindings if b["role"] == role]
        assert binding["members"] == [member] and "condition" not in binding
    capsys.readouterr()
    assert main(["setup", "--apply"]) == 0  # repeatable: nothing granted twice
    assert capsys.readouterr().out.count("granted already") == 3 + len(VM_ROLES)
    assert len(iam.policy(PROJECT)["bindings"]) == len(bindings)

    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    code, lines = doctor_lines(capsys)
    assert code == 0, lines
    names = [line.split(": ")[0] for line in lines]
    assert names[-3:] == ["✓ Batch API", "✓ Batch jobs", "✓ Batch VM roles"]
    assert "✓ VM self-delete" in names  # gce's checks ran first, whole

    # The binding gone (a setup from before Batch was configured): one ✗, naming the fix.
    policy = iam.policy(PROJECT)
    policy["bindings"] = [b for b in policy["bindings"] if b["role"] != "roles/logging.logWriter"]
    code, lines = doctor_lines(capsys)
    crosses = [line for line in lines if line.startswith("✗")]
    assert code == 4 and len(crosses) == 1, lines
    assert crosses[0].startswith(f"✗ Batch VM roles: {ACCOUNT} lacks roles/logging.logWriter")
    assert "run `bench setup --apply`" in crosses[0]


def test_doctor_checks_batch_only_where_it_is_in_use(iam, batch_server, capsys):  # noqa: F811
    assert main(["setup", "--apply"]) == 0
    capsys.readouterr()
    _, lines = doctor_lines(capsys)
    assert lines and not [line for line in lines if "Batch" in line]
    assert not [r for r in batch_server.requests if r[0] == "GET"]


def test_status_says_waiting_for_capacity_while_batch_holds_the_job(
    batch, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")
    batch.stockout("us-central1")
    assert main(launch("--budget", "1.00", "--plan", plan_file(tmp_path))) == 0
    run_id = launched_run_id(capsys)
    assert main(["status", run_id, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["runs"]
    assert shown["state"] == "waiting for capacity"
    assert shown["cost_usd"] == 0.0  # no VM yet: nothing bills
    assert main(["status", run_id]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if run_id in line)
    assert "waiting for capacity" in row and "$0.00/1.00" in row


def test_prices_states_the_batch_attempts_that_launch_configures(batch, tmp_path, capsys):
    plan = plan_file(tmp_path)
    assert main(["prices", "--plan", plan, "--json"]) == 0
    terms = json.loads(capsys.readouterr().out)["one_dollar_attempts"]["batch"]
    assert terms["attempts"] >= 2 and terms["worst_case_usd"] <= 1.00
    assert terms["region"] == "us-central1"
    assert main(["prices", "--plan", plan]) == 0
    shown = " ".join(capsys.readouterr().out.split())  # wrapped at the terminal's width
    assert f"Cloud Batch: $1.00 buys {terms['summary']}" in shown
    batch.run_scripts = False
    assert main(launch("--budget", "1.00", "--plan", plan)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert terms["summary"] in said  # the launch says the same figure
    spec = batch.created[0]["taskGroups"][0]["taskSpec"]
    assert spec["maxRunDuration"] == f"{terms['attempt_seconds']}s"
    assert 1 + spec["maxRetryCount"] == terms["attempts"]


# Who launches a Batch job needs roles/batch.jobsEditor on the project and
# roles/iam.serviceAccountUser on the job's account
# (https://cloud.google.com/batch/docs/create-run-job-custom-service-account): setup grants
# them to each --launcher.
BOB = "user:bob@example.com"
JOBS_EDITOR = "roles/batch.jobsEditor"
ACCOUNT_USER = "roles/iam.serviceAccountUser"


def test_setup_plans_each_launchers_batch_grants_and_drops_the_manual_line(
    bench_env, capsys, monkeypatch
):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    monkeypatch.setenv("BENCH_BACKEND", "batch")
    assert main(["setup", "--launcher", BOB]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("gcloud ")]
    assert lines[-2:] == [
        f"gcloud projects add-iam-policy-binding {PROJECT} --member={BOB} "
        f"--role={JOBS_EDITOR} --condition=None",
        f"gcloud iam service-accounts add-iam-policy-binding {ACCOUNT} --project={PROJECT} "
        f"--member={BOB} --role={ACCOUNT_USER}",
    ]
    assert f"{ACCOUNT_USER} for {BOB} on {ACCOUNT} only" in out
    assert "user:EMAIL" not in out and "whoever launches" not in out  # nothing by hand
    # Without Batch in use, a launcher gets the signer's grant alone.
    monkeypatch.delenv("BENCH_BACKEND")
    assert main(["setup", "--launcher", BOB]) == 0
    out = capsys.readouterr().out
    assert JOBS_EDITOR not in out and ACCOUNT_USER not in out


def _holders(bindings: list[dict], role: str) -> list[dict]:
    return [b for b in bindings if b["role"] == role]


def test_setup_grants_a_launcher_jobs_on_the_project_and_the_vm_account_alone(
    iam,  # noqa: F811 - the fixture imported above
    batch_in_use,
    capsys,
):
    assert main(["setup", "--apply", "--launcher", BOB]) == 0
    out = capsys.readouterr().out
    assert "creates, reads and deletes Batch jobs: granted\n" in out
    assert "its Batch jobs run as that account: granted\n" in out
    project = iam.policy(PROJECT)["bindings"]
    assert _holders(project, JOBS_EDITOR) == [{"role": JOBS_EDITOR, "members": [BOB]}]
    assert not _holders(project, ACCOUNT_USER)  # not on every account of the project
    own = iam.account_policy(ACCOUNT)["bindings"]
    assert _holders(own, ACCOUNT_USER) == [{"role": ACCOUNT_USER, "members": [BOB]}]
    etag = iam.account_policy(ACCOUNT)["etag"]
    assert main(["setup", "--apply", "--launcher", BOB]) == 0  # a second run: no change
    out = capsys.readouterr().out
    assert "Batch jobs: granted already\n" in out
    assert "run as that account: granted already\n" in out
    assert iam.account_policy(ACCOUNT)["etag"] == etag
    assert len(iam.policy(PROJECT)["bindings"]) == len(project)


def test_a_launcher_setup_named_creates_batch_jobs_and_was_refused_before(
    iam,  # noqa: F811 - the fixture imported above
    batch_in_use,
    tmp_path,
    capsys,
    monkeypatch,
):
    """Bob may sign as the signer (gce's setup named him) but holds nothing for Batch: his
    Batch launch is refused at jobs.create and creates nothing. Once setup with Batch in use
    names him, his job is created, running as bench's VM account."""
    batch_in_use.iam = iam  # Batch authorizes against the IAM stand-in's caller and policies
    batch_in_use.run_scripts = False
    for name in ("BENCH_BACKEND", "BENCH_BATCH_ENDPOINT"):  # Batch not in use yet
        monkeypatch.delenv(name)
    assert main(["setup", "--apply", "--launcher", BOB]) == 0  # gce's grants alone
    assert JOBS_EDITOR not in capsys.readouterr().out
    monkeypatch.setenv("BENCH_BACKEND", "batch")
    monkeypatch.setenv("BENCH_BATCH_ENDPOINT", batch_in_use.endpoint)
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    plan = plan_file(tmp_path)
    iam.caller = BOB
    capsys.readouterr()
    assert main(launch("--budget", "1.00", "--plan", plan)) == 4
    err = " ".join(capsys.readouterr().err.split())
    assert "Cloud Batch denied the request" in err and "'batch.jobs.create' denied" in err
    assert f"you need {JOBS_EDITOR} on the project and {ACCOUNT_USER} on the job's" in err
    assert "bench setup --apply --launcher" in err and "compute.instanceAdmin" not in err
    ((member, permission, _),) = batch_in_use.denied
    assert (member, permission) == (BOB, "batch.jobs.create")
    assert not batch_in_use.created
    iam.caller = CONTROLLER_MEMBER  # the owner runs setup
    assert main(["setup", "--apply", "--launcher", BOB]) == 0
    iam.caller = BOB
    capsys.readouterr()
    assert main(launch("--budget", "1.00", "--plan", plan)) == 0
    (body,) = batch_in_use.created
    assert body["allocationPolicy"]["serviceAccount"]["email"] == ACCOUNT
    assert len(batch_in_use.denied) == 1
