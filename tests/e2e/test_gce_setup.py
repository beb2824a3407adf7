"""`bench setup`: printed commands, and --apply against the IAM / Resource Manager stand-in
and fake-gcs-server behind the IAM proxy; then a run with the account it made deletes its
own VM."""

from __future__ import annotations

import uuid

import pytest

from orchestrator.cli import main
from orchestrator.service.setup import SELF_DELETE_CONDITION
from tests.e2e.test_gce_cli import plan_file
from tests.fakes.gcs_proxy import GcsIamProxy
from tests.fakes.iam_server import FakeIamServer

pytestmark = pytest.mark.timeout(120)
PROJECT = "bench-test-project"
ACCOUNT = f"bench-vm@{PROJECT}.iam.gserviceaccount.com"


def test_setup_prints_one_checkable_gcloud_line_per_step(bench_env, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line for line in lines if line.startswith("gcloud ")]
    assert [c.split()[1:3] for c in commands] == [
        ["storage", "buckets"],
        ["iam", "service-accounts"],
        ["storage", "buckets"],
        ["iam", "roles"],
        ["projects", "add-iam-policy-binding"],
    ]
    assert "--permissions=compute.instances.delete --stage=GA" in commands[3]
    assert (
        "--role=roles/storage.objectUser" in commands[2] and "gs://my-bench-results" in commands[2]
    )
    assert 'startsWith("bench-")' in commands[4]
    assert f'service_account = "{ACCOUNT}"' in lines[-2]


@pytest.fixture
def iam(gce, gcs_server, monkeypatch):
    with FakeIamServer() as server, GcsIamProxy(gcs_server.endpoint, gce.account_of_token) as proxy:
        monkeypatch.setenv("BENCH_IAM_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_RESOURCEMANAGER_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        monkeypatch.setenv("BENCH_BUCKET", f"bench-setup-{uuid.uuid4().hex[:10]}")
        server.proxy = proxy
        yield server


def test_apply_creates_least_privilege_setup_and_is_repeatable(iam, gce, capsys):
    assert main(["setup", "--apply"]) == 0
    assert ACCOUNT in iam.accounts
    (role,) = iam.roles.values()
    assert role["includedPermissions"] == ["compute.instances.delete"]
    policy = iam.policy(PROJECT)
    (binding,) = policy["bindings"]
    assert binding["members"] == [f"serviceAccount:{ACCOUNT}"]
    assert binding["condition"]["expression"] == SELF_DELETE_CONDITION
    assert policy["version"] == 3
    assert iam.proxy.object_members == {f"serviceAccount:{ACCOUNT}"}
    capsys.readouterr()
    assert main(["setup", "--apply"]) == 0  # a second run changes nothing
    out = capsys.readouterr().out
    assert out.count("exists already") == 3 and "granted already" in out
    assert len(iam.policy(PROJECT)["bindings"]) == 1


def test_after_setup_a_run_deletes_its_own_vm_and_doctor_is_green(
    iam, gce, tmp_path, capsys, monkeypatch
):
    assert main(["setup", "--apply"]) == 0
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    gce.accounts_may_delete = iam.accounts_allowed_to_delete_bench_instances(PROJECT)
    capsys.readouterr()
    assert main(["doctor"]) == 0, capsys.readouterr()
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path), "--wait"]
    assert main(args) == 0, capsys.readouterr()
    assert gce.instances() == []
    assert "deleted itself" in capsys.readouterr().out
    (delete,) = gce.calls("instances.delete")
    assert delete.caller.startswith("vm:bench-")  # the VM itself, not the controller
    (sent,) = gce.inserted
    (account,) = sent["serviceAccounts"]
    assert account["email"] == ACCOUNT
    assert "https://www.googleapis.com/auth/compute" in account["scopes"]
