"""`bench setup`: printed commands, and --apply against the IAM / Resource Manager stand-in
and fake-gcs-server behind the IAM proxy; then a run with the account it made deletes its
own VM."""

from __future__ import annotations

import uuid

import pytest

from orchestrator.backends.gce.iam import self_delete_condition
from orchestrator.cli import main
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
        ["iam", "roles"],
        ["storage", "buckets"],
        ["iam", "roles"],
        ["storage", "buckets"],
        ["iam", "roles"],
        ["projects", "add-iam-policy-binding"],
    ]
    writer, runs, reader, cache, deleter, delete = commands[2:]
    perms = "--permissions=storage.objects.create,storage.objects.delete,storage.objects.get "
    assert perms in writer and "storage.objects.list" not in writer
    condition = 'resource.name.startsWith("projects/_/buckets/my-bench-results/objects/bench/'
    assert f"{condition}runs/" in runs and "roles/benchRunObjects" in runs
    assert "--permissions=storage.objects.get --stage=GA" in reader
    assert f"{condition}cache/" in cache and "roles/benchCacheReader" in cache
    assert "--permissions=compute.instances.delete --stage=GA" in deleter
    assert f'resource.name.startsWith("projects/{PROJECT}/zones/")' in delete
    assert 'extract("/instances/{name}").startsWith("bench-")' in delete
    assert f'service_account = "{ACCOUNT}"' in lines[-2]


@pytest.fixture
def iam(gce, gcs_server, monkeypatch):
    with (
        FakeIamServer() as server,
        GcsIamProxy(gcs_server.endpoint, gce.account_of_token, server.roles) as proxy,
    ):
        monkeypatch.setenv("BENCH_IAM_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_RESOURCEMANAGER_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        monkeypatch.setenv("BENCH_BUCKET", f"bench-setup-{uuid.uuid4().hex[:10]}")
        server.proxy = proxy
        gce.iam = server  # the compute stand-in authorizes VM tokens against this IAM
        yield server


def test_apply_creates_least_privilege_setup_and_is_repeatable(iam, gce, capsys):
    assert main(["setup", "--apply"]) == 0
    assert ACCOUNT in iam.accounts
    permissions = sorted(tuple(r["includedPermissions"]) for r in iam.roles.values())
    assert permissions == [
        ("compute.instances.delete",),
        ("storage.objects.create", "storage.objects.delete", "storage.objects.get"),
        ("storage.objects.get",),
    ]
    policy = iam.policy(PROJECT)
    (binding,) = policy["bindings"]
    assert binding["members"] == [f"serviceAccount:{ACCOUNT}"]
    assert binding["condition"]["expression"] == self_delete_condition(PROJECT)
    assert policy["version"] == 3
    assert iam.proxy.members() == {f"serviceAccount:{ACCOUNT}"}
    assert all("condition" in b for b in iam.proxy.bindings) and len(iam.proxy.bindings) == 2
    capsys.readouterr()
    assert main(["setup", "--apply"]) == 0  # a second run changes nothing
    out = capsys.readouterr().out
    assert out.count("exists already") == 5 and out.count("granted already") == 3
    assert len(iam.policy(PROJECT)["bindings"]) == 1 and len(iam.proxy.bindings) == 2


def test_after_setup_a_run_deletes_its_own_vm_and_doctor_is_green(
    iam, gce, tmp_path, capsys, monkeypatch
):
    assert main(["setup", "--apply"]) == 0
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    capsys.readouterr()
    assert main(["doctor"]) == 0, capsys.readouterr()
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path), "--wait"]
    assert main(args) == 0, (capsys.readouterr(), iam.proxy.denied)
    assert gce.instances() == []
    assert "deleted itself" in capsys.readouterr().out
    (delete,) = gce.calls("instances.delete")
    assert delete.caller.startswith("vm:bench-")  # the VM itself, not the controller
    (sent,) = gce.inserted
    (account,) = sent["serviceAccounts"]
    assert account["email"] == ACCOUNT
    assert "https://www.googleapis.com/auth/compute" in account["scopes"]
