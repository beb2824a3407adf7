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
