"""`bench setup`: printed commands, and --apply against the IAM / Resource Manager stand-in
and fake-gcs-server behind the IAM proxy. A run with the account it made deletes its own
VM: tests/e2e/test_hostile_vm.py."""

from __future__ import annotations

import json
import uuid

import pytest

from orchestrator.backends.gce import setup as gce_setup
from orchestrator.backends.gce.iam import (
    CACHE_READER_ROLE_ID,
    OBJECT_WRITER_ROLE_ID,
    SELF_DELETE_ROLE_ID,
    objects_condition,
    self_delete_condition,
)
from orchestrator.cli import main
from tests.fakes.gcs_proxy import GcsIamProxy
from tests.fakes.iam_server import FakeIamServer

pytestmark = pytest.mark.timeout(120)
PROJECT = "bench-test-project"
RUNS = "bench/runs/"  # the runs folder under BenchConfig's default prefix
ACCOUNT = f"bench-vm@{PROJECT}.iam.gserviceaccount.com"
SIGNER = f"bench-signer@{PROJECT}.iam.gserviceaccount.com"


def test_setup_prints_one_checkable_gcloud_line_per_step(bench_env, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line for line in lines if line.startswith("gcloud ")]
    assert [c.split()[1:3] for c in commands] == [
        ["storage", "buckets"],
        ["storage", "buckets"],
        ["iam", "service-accounts"],
        ["iam", "service-accounts"],
        ["iam", "roles"],
        ["storage", "buckets"],
        ["iam", "roles"],
        ["storage", "buckets"],
        ["iam", "roles"],
        ["projects", "add-iam-policy-binding"],
    ]
    lifecycle, vm, signer, writer, runs, reader, cache, deleter, delete = commands[1:]
    # runs/ is not kept for ever: setup says for how long, and how to change it.
    assert lifecycle == (
        "gcloud storage buckets update gs://my-bench-results --lifecycle-file=bench-lifecycle.json"
    )
    out = "\n".join(lines)
    assert "each object under bench/runs/ (a run's payload and results) is deleted 30 days" in out
    assert "runs_retention_days = 30 in bench.toml" in out
    rule = {"action": {"type": "Delete"}, "condition": {"age": 30, "matchesPrefix": [RUNS]}}
    assert f"bench-lifecycle.json holds {json.dumps({'rule': [rule]})}" in out
    assert "create bench-vm " in vm and "create bench-signer " in signer
    perms = "--permissions=storage.objects.create,storage.objects.delete,storage.objects.get "
    assert perms in writer and "storage.objects.list" not in writer
    condition = 'resource.name.startsWith("projects/_/buckets/my-bench-results/objects/bench/'
    # Every name is public: the run objects' role goes to the signer alone (a run reaches its
    # own objects through the grants launch signs), the VM account reads cache/ only.
    assert f"{condition}runs/" in runs and "roles/benchRunObjects" in runs
    assert f"--member=serviceAccount:{SIGNER} " in runs and ACCOUNT not in runs
    assert "--permissions=storage.objects.get --stage=GA" in reader
    assert f"{condition}cache/" in cache and "roles/benchCacheReader" in cache
    assert f"--member=serviceAccount:{ACCOUNT} " in cache and SIGNER not in cache
    assert "--permissions=compute.instances.delete,compute.disks.delete --stage=GA" in deleter
    assert f'resource.name.startsWith("projects/{PROJECT}/zones/")' in delete
    assert 'extract("/instances/{name}").startsWith("bench-")' in delete
    assert 'extract("/disks/{name}").startsWith("bench-")' in delete
    assert f'service_account = "{ACCOUNT}"' in lines[-2]


@pytest.fixture
def iam(gce, gcs_server, monkeypatch):
    """IAM whose new accounts are refused for their first uses, as Google's may be for a
    minute (iam_server.py); setup's waits between retries shortened to keep tests fast."""
    monkeypatch.setattr(gce_setup, "PROPAGATION_DELAYS_S", (0.01,) * 7)
    with (
        FakeIamServer() as server,
        GcsIamProxy(
            gcs_server.endpoint,
            gce.identity_of_token,
            server.roles,
            server.member_problem,
            server.public_key,
        ) as proxy,
    ):
        monkeypatch.setenv("BENCH_IAM_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_IAMCREDENTIALS_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_RESOURCEMANAGER_ENDPOINT", server.endpoint)
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        server.bucket = f"bench-setup-{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv("BENCH_BUCKET", server.bucket)
        server.proxy = proxy
        gce.iam = server  # the compute stand-in authorizes VM tokens against this IAM
        yield server


def test_apply_creates_least_privilege_setup_and_is_repeatable(iam, gce, capsys):
    assert main(["setup", "--apply"]) == 0
    assert ACCOUNT in iam.accounts
    permissions = sorted(tuple(r["includedPermissions"]) for r in iam.roles.values())
    assert permissions == [
        ("compute.instances.delete", "compute.disks.delete"),
        ("storage.objects.create", "storage.objects.delete", "storage.objects.get"),
        ("storage.objects.get",),
    ]
    policy = iam.policy(PROJECT)
    (binding,) = [b for b in policy["bindings"] if b["role"] != "roles/owner"]
    assert binding["members"] == [f"serviceAccount:{ACCOUNT}"]
    assert binding["condition"]["expression"] == self_delete_condition(PROJECT)
    assert policy["version"] == 3
    assert SIGNER in iam.accounts
    # On the bucket: the signer may touch runs/ objects (for the grants it signs), the VM
    # account may read cache/ objects; neither holds anything else there.
    held = {
        (member, b["role"].rsplit("/", 1)[1], b["condition"]["expression"])
        for b in iam.proxy.bindings
        for member in b["members"]
    }
    runs = objects_condition(iam.bucket, "bench", "runs")
    cache = objects_condition(iam.bucket, "bench", "cache")
    assert held == {
        (f"serviceAccount:{SIGNER}", OBJECT_WRITER_ROLE_ID, runs),
        (f"serviceAccount:{ACCOUNT}", CACHE_READER_ROLE_ID, cache),
    }
    capsys.readouterr()
    assert main(["setup", "--apply"]) == 0  # a second run changes nothing
    out = capsys.readouterr().out
    assert out.count("exists already") == 6 and out.count("granted already") == 3
    assert len(iam.policy(PROJECT)["bindings"]) == 2 and len(iam.proxy.bindings) == 2


def test_apply_waits_out_a_new_accounts_propagation(iam, capsys):
    """Google: a new service account may be unusable for 60 s or more. The stand-in refuses
    its first two uses with "does not exist", as Google answers; setup retries the grant
    (backing off) instead of failing half-way."""
    assert iam.unusable_uses == 2
    assert main(["setup", "--apply"]) == 0
    out = capsys.readouterr().out
    # Each new account (the VM's, the signer) is refused twice before its first grant holds.
    assert out.count("the new service account is not visible yet") == 4
    assert iam.refused_uses == {ACCOUNT: 2, SIGNER: 2}
    assert iam.proxy.members() == {f"serviceAccount:{ACCOUNT}", f"serviceAccount:{SIGNER}"}
    assert any(b["role"].endswith(SELF_DELETE_ROLE_ID) for b in iam.policy(PROJECT)["bindings"])


def test_apply_gives_up_after_its_bounded_wait_and_says_to_run_it_again(iam, capsys):
    iam.unusable_uses = 100  # never visible within the retries
    assert main(["setup", "--apply"]) == 4
    captured = capsys.readouterr()
    assert captured.out.count("not visible yet") == len(gce_setup.PROPAGATION_DELAYS_S)
    assert "run `bench setup --apply` again in a minute" in captured.err


def test_apply_brings_an_older_self_delete_role_to_both_permissions(iam, capsys):
    """An earlier setup's role held compute.instances.delete alone; deleting a VM deletes its
    boot disk too (backends/gce/iam.py): a repeat of setup updates the role."""
    assert main(["setup", "--apply"]) == 0
    role = iam.roles[f"projects/{PROJECT}/roles/{SELF_DELETE_ROLE_ID}"]
    role["includedPermissions"] = ["compute.instances.delete"]
    capsys.readouterr()
    assert main(["setup", "--apply"]) == 0
    assert "updated to hold only compute.instances.delete, compute.disks.delete" in (
        capsys.readouterr().out
    )
    assert role["includedPermissions"] == ["compute.instances.delete", "compute.disks.delete"]


# After setup, doctor is green and a run as the account setup made deletes its own VM: the
# honest run of tests/e2e/test_hostile_vm.py, which then attacks it (one run for both).


def test_apply_on_a_bucket_without_uniform_access_says_what_to_do_and_grants_nothing(
    iam, gcs_server, capsys
):
    """Issue 50 item 6: IAM Conditions need uniform bucket-level access; on a bucket without
    it Cloud Storage refuses a conditional binding with 400 (the stand-in does too), so setup
    stops at the bucket step and names the fix instead of failing at the grants."""
    from google.api_core.exceptions import BadRequest
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": iam.proxy.endpoint},
    )
    bucket = client.bucket(iam.bucket)
    bucket.iam_configuration.uniform_bucket_level_access_enabled = False
    bucket.create()
    # The stand-in, as Cloud Storage: a conditional binding on such a bucket is a 400.
    policy = bucket.get_iam_policy(requested_policy_version=3)
    policy.version = 3
    policy.bindings.append(
        {
            "role": "roles/storage.objectViewer",
            "members": {"user:alice@example.com"},
            "condition": {"title": "t", "expression": 'resource.name.startsWith("x")'},
        }
    )
    with pytest.raises(BadRequest, match="uniform bucket-level access"):
        bucket.set_iam_policy(policy)
    assert not client.get_bucket(iam.bucket).iam_configuration.uniform_bucket_level_access_enabled

    assert main(["setup", "--apply"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"gs://{iam.bucket} exists without uniform bucket-level access" in err
    assert f"gcloud storage buckets update gs://{iam.bucket} --uniform-bucket-level-access" in err
    assert iam.proxy.bindings == []


def test_apply_creates_its_bucket_with_uniform_access(iam):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    assert main(["setup", "--apply"]) == 0
    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": iam.proxy.endpoint},
    )
    assert client.get_bucket(iam.bucket).iam_configuration.uniform_bucket_level_access_enabled


def test_apply_sets_the_runs_lifecycle_rule_keeps_other_rules_and_follows_the_setting(
    iam, capsys, monkeypatch
):
    """Objects under <prefix>/runs/ are deleted runs_retention_days (30) days after they were
    written (https://cloud.google.com/storage/docs/lifecycle); the bucket proxy keeps the
    lifecycle configuration as buckets.patch sets it (fake-gcs-server drops it)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    assert main(["setup", "--apply"]) == 0
    out = capsys.readouterr().out
    assert "each object under bench/runs/ (a run's payload and results) is deleted 30 days" in out
    rule = {"action": {"type": "Delete"}, "condition": {"age": 30, "matchesPrefix": [RUNS]}}
    assert iam.proxy.lifecycle[iam.bucket] == {"rule": [rule]}
    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": iam.proxy.endpoint},
    )
    bucket = client.get_bucket(iam.bucket)
    assert [dict(r) for r in bucket.lifecycle_rules] == [rule]
    # The owner's own rule stays; a second setup changes nothing; another setting replaces
    # bench's rule, not theirs.
    theirs = {"action": {"type": "Delete"}, "condition": {"age": 400, "matchesPrefix": ["x/"]}}
    bucket.lifecycle_rules = [rule, theirs]
    bucket.patch()
    assert main(["setup", "--apply"]) == 0
    assert "set already" in capsys.readouterr().out
    monkeypatch.setenv("BENCH_RUNS_RETENTION_DAYS", "7")
    assert main(["setup", "--apply"]) == 0
    assert "deleted 7 days after it was written" in capsys.readouterr().out
    week = {"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": [RUNS]}}
    assert iam.proxy.lifecycle[iam.bucket] == {"rule": [theirs, week]}
    # Cloud Storage refuses a rule with no condition (the proxy as well).
    bucket.lifecycle_rules = [{"action": {"type": "Delete"}, "condition": {}}]
    with pytest.raises(Exception, match="400"):
        bucket.patch()


# Launch signs each run's grants as the signer (signBlob), which needs
# roles/iam.serviceAccountTokenCreator on that account: setup grants it to each launcher.
ALICE = "user:alice@example.com"


def _token_creators(iam) -> list[dict]:
    return [
        b
        for b in iam.account_policy(SIGNER).get("bindings", [])
        if b["role"] == gce_setup.TOKEN_CREATOR
    ]


def test_setup_plans_the_launchers_grant_on_the_signer_alone(bench_env, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup", "--launcher", ALICE, "--launcher", "group:ci@example.com"]) == 0
    lines = capsys.readouterr().out.splitlines()
    grants = [line for line in lines if "service-accounts add-iam-policy-binding" in line]
    assert grants == [
        f"gcloud iam service-accounts add-iam-policy-binding {SIGNER} --project={PROJECT} "
        f"--member={member} --role=roles/iam.serviceAccountTokenCreator"
        for member in (ALICE, "group:ci@example.com")
    ]
    assert not any("YOUR_EMAIL" in line for line in lines)  # nothing left to do by hand


def test_setup_without_a_launcher_names_the_option(bench_env, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert "TokenCreator" not in out.split("whoever launches")[0]  # no step grants it
    assert "bench setup --apply --launcher user:YOUR_EMAIL" in out


def test_setup_offers_a_service_accounts_credentials_as_the_launcher(
    bench_env, tmp_path, capsys, monkeypatch
):
    """Credentials from a service account's key file name their account (no network
    call): setup grants it unless told whom."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    ci = f"ci-runner@{PROJECT}.iam.gserviceaccount.com"
    credentials = tmp_path / "ci-key.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": ci,
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    monkeypatch.setenv("BENCH_PROJECT", PROJECT)
    monkeypatch.setenv("BENCH_BUCKET", "my-bench-results")
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert f"--member=serviceAccount:{ci} --role=roles/iam.serviceAccountTokenCreator" in out
    assert "YOUR_EMAIL" not in out
    assert main(["setup", "--launcher", ALICE]) == 0  # named launchers replace it
    out = capsys.readouterr().out
    assert f"--member={ALICE} " in out and ci not in out


def test_apply_grants_each_launcher_token_creator_on_the_signer_and_is_repeatable(iam, capsys):
    assert main(["setup", "--apply", "--launcher", ALICE]) == 0
    out = capsys.readouterr().out
    assert f"roles/iam.serviceAccountTokenCreator for {ALICE} on {SIGNER} only" in out
    assert f"as {ALICE} signs each run's grants as that account: granted\n" in out
    assert "YOUR_EMAIL" not in out
    assert _token_creators(iam) == [{"role": gce_setup.TOKEN_CREATOR, "members": [ALICE]}]
    # On the signer alone: not on the project, not on the VM's account.
    assert not any(b["role"] == gce_setup.TOKEN_CREATOR for b in iam.policy(PROJECT)["bindings"])
    assert ACCOUNT not in iam.account_policies
    etag = iam.account_policy(SIGNER)["etag"]
    assert main(["setup", "--apply", "--launcher", ALICE]) == 0  # a second run: no change
    out = capsys.readouterr().out
    assert f"`bench launch` as {ALICE} signs each run's grants as that account: granted " in (
        out.replace("granted already", "granted ")
    )
    assert out.count("granted already") == 4  # the three grants above, and this one
    assert iam.account_policy(SIGNER)["etag"] == etag
    # Another launcher joins the same binding; the first stays.
    assert main(["setup", "--apply", "--launcher", "group:ci@example.com"]) == 0
    members = ["user:alice@example.com", "group:ci@example.com"]
    assert _token_creators(iam) == [{"role": gce_setup.TOKEN_CREATOR, "members": members}]


@pytest.mark.parametrize(
    "member", ["alice@example.com", "user:alice", "owner:alice@example.com", "user:"]
)
def test_apply_refuses_a_launcher_that_is_not_a_member_and_does_nothing(iam, capsys, member):
    assert main(["setup", "--apply", "--launcher", ALICE, "--launcher", member]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert f"--launcher {member!r} is not an IAM member" in line
    assert "user:EMAIL, group:EMAIL or serviceAccount:EMAIL" in line
    assert captured.out == "" and iam.calls == [] and iam.proxy.bindings == []


def test_a_launcher_setup_named_signs_and_anyone_else_is_refused(
    iam, gce, tmp_path, capsys, monkeypatch
):
    """The member setup granted launches (its run's grants signed as the signer); a member
    without the grant gets the refusal that says what to hold, and no VM."""
    from tests.e2e.test_gce_cli import plan_file

    assert main(["setup", "--apply", "--launcher", ALICE]) == 0
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    plan = plan_file(tmp_path)
    iam.caller = "user:bob@example.com"
    capsys.readouterr()
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 4
    err = " ".join(capsys.readouterr().err.split())
    assert f"may not sign as {SIGNER} (403)" in err
    assert "hold roles/iam.serviceAccountTokenCreator on it" in err
    assert not gce.instances()
    iam.caller = ALICE
    signed = len([c for c in iam.calls if c[0] == "projects.serviceAccounts.signBlob"])
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    calls = [c for c in iam.calls if c[0] == "projects.serviceAccounts.signBlob"]
    assert len(calls) == signed + 2  # the payload's URL and the upload policy
    assert len(gce.instances()) == 1
