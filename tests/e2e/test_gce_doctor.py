"""`bench doctor` against the compute stand-in, the IAM stand-in and fake-gcs-server behind
the IAM proxy: all ✓ on a ready project; each broken thing gives exactly one ✗ line naming
its fix; a new project's defaults name the quota requests it needs."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from orchestrator.backends.gce.iam import SELF_DELETE_ROLE_ID
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from tests.e2e.test_gce_setup import ACCOUNT, iam  # noqa: F401 - fixture
from tests.fakes.compute_state import project_number
from tests.fakes.iam_policy import PREDEFINED_ROLES

pytestmark = pytest.mark.timeout(60)
PROJECT = "bench-test-project"
DEFAULT_ACCOUNT = f"{project_number(PROJECT)}-compute@developer.gserviceaccount.com"
FAMILY = BenchConfig().image_family
# What doctor itself reads of IAM: the project's policy and bench's role.
_POLICY_READER = {"resourcemanager.projects.getIamPolicy", "iam.roles.get"}


@pytest.fixture
def project(iam, gce, capsys, monkeypatch):  # noqa: F811
    """A ready project: GPU quota granted (the gce fixture), `bench setup --apply` done, its
    VM account in bench.toml."""
    assert main(["setup", "--apply"]) == 0
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    capsys.readouterr()
    gce.proxy, gce.iam_server = iam.proxy, iam
    yield gce


def _controller_holds(project, permissions: set[str]) -> None:
    """The caller (bench's user) holds exactly these on the project, instead of owner."""
    role = f"projects/{PROJECT}/roles/caller"
    project.iam_server.roles[role] = {"includedPermissions": sorted(permissions)}
    for binding in project.iam_server.policy(PROJECT)["bindings"]:
        if binding["role"] == "roles/owner":
            binding["role"] = role


def doctor(capsys) -> tuple[int, list[str], list[str]]:
    code = main(["doctor"])
    captured = capsys.readouterr()
    assert code in (0, 4), captured.err
    out = captured.out.splitlines()
    return (
        code,
        [line for line in out if line.startswith("✓")],
        [line for line in out if line.startswith("✗")],
    )


def test_a_healthy_project_is_all_ticks(project, capsys):
    code, ticks, crosses = doctor(capsys)
    assert code == 0 and crosses == []
    names = [line.split(": ")[0] for line in ticks]
    # gcloud is advice (a launch needs none): "!" and no tick where it is missing.
    settings = ["✓ gcloud installed"] if shutil.which("gcloud") else []
    settings += ["✓ project set", "✓ bucket set"]
    assert names[: len(settings)] == settings
    assert names[len(settings) :] == [
        "✓ credentials",
        "✓ project",
        "✓ Compute API",
        "✓ zone us-central1-a",
        "✓ zone us-central1-b",
        "✓ zone us-central1-c",
        f"✓ image family {FAMILY}",
        "✓ GPU quota us-central1",
        "✓ GPUS_ALL_REGIONS",
        f"✓ bucket gs://{os.environ['BENCH_BUCKET']}",
        "✓ VM bucket access",
        "✓ create VMs",
        "✓ act as the VM account",
        "✓ VM self-delete",
        "✓ org policies",
    ]
    assert not [r for r in project.requests if r.api_method == "instances.insert"]


def _break(project, monkeypatch, what: str) -> None:
    catalog = project.catalog
    if what == "credentials":
        catalog.credentials_valid = False
    elif what == "compute-api":
        catalog.compute_api_enabled = False
    elif what == "unknown-zone":
        monkeypatch.setenv("BENCH_ZONES", "us-central1-a,us-central1-z")
    elif what == "zone-without-l4":
        catalog.zones_without_l4.add("us-central1-b")
    elif what == "deprecated-image":
        catalog.deprecate_family(
            "deeplearning-platform-release", FAMILY, "common-cu129-ubuntu-2404-nvidia-580"
        )
    elif what == "regional-quota":
        catalog.set_region_quota("us-central1", "NVIDIA_L4_GPUS", 0.0)
        catalog.set_region_quota("us-central1", "PREEMPTIBLE_NVIDIA_L4_GPUS", 0.0)
    elif what == "global-quota":
        catalog.project_quotas["GPUS_ALL_REGIONS"] = 0.0
    elif what == "missing-bucket":
        monkeypatch.setenv("BENCH_BUCKET", "bench-no-such-bucket")
    elif what == "vm-bucket-access":
        project.proxy.bindings.clear()
    elif what == "missing-image":
        monkeypatch.setenv("BENCH_IMAGE_FAMILY", "pytorch-9-9-cu999-ubuntu-2204-nvidia-999")
    elif what == "no-create":
        instance_admin = set(PREDEFINED_ROLES["roles/compute.instanceAdmin.v1"])
        everything_else = instance_admin - {"compute.instances.create"}
        _controller_holds(project, everything_else | _POLICY_READER | {"iam.serviceAccounts.actAs"})
    elif what == "no-act-as":
        instance_admin = set(PREDEFINED_ROLES["roles/compute.instanceAdmin.v1"])
        _controller_holds(project, instance_admin | _POLICY_READER)
    elif what == "no-self-delete":
        policy = project.iam_server.policy(PROJECT)
        policy["bindings"] = [
            b for b in policy["bindings"] if not b["role"].endswith(SELF_DELETE_ROLE_ID)
        ]
    elif what == "old-self-delete-role":
        role = project.iam_server.roles[f"projects/{PROJECT}/roles/{SELF_DELETE_ROLE_ID}"]
        role["includedPermissions"] = ["compute.instances.delete"]
    elif what == "external-ip-denied":
        # Only named instances may have an external IP (the constraint's list form).
        project.iam_server.org_policies[(PROJECT, "constraints/compute.vmExternalIpAccess")] = {
            "constraint": "constraints/compute.vmExternalIpAccess",
            "listPolicy": {
                "allowedValues": [f"projects/{PROJECT}/zones/us-central1-a/instances/x"]
            },
        }
    elif what == "untrusted-image-project":
        project.iam_server.org_policies[(PROJECT, "constraints/compute.trustedImageProjects")] = {
            "constraint": "constraints/compute.trustedImageProjects",
            "listPolicy": {"allowedValues": ["projects/debian-cloud"]},
        }
    elif what == "default-account":
        monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", "default")
        monkeypatch.delenv("BENCH_ALLOW_LEFTOVER_DISK")
        # It needs no role on the bucket (its runs' grants are bench-signer's), and holds
        # none: an object role of a VM account would be a cross of its own.


@pytest.mark.parametrize(
    ("what", "cross", "fix"),
    [
        ("credentials", "✗ credentials", "run `gcloud auth application-default login`"),
        ("compute-api", "✗ Compute API", "gcloud services enable compute.googleapis.com"),
        ("unknown-zone", "✗ zone us-central1-z: no such zone", "remove us-central1-z"),
        ("zone-without-l4", "✗ zone us-central1-b: does not offer", "remove us-central1-b"),
        (
            "deprecated-image",
            f"✗ image family {FAMILY}: deprecated (DEPRECATED); its successor is "
            "common-cu129-ubuntu-2404-nvidia-580",
            "set image_family = 'common-cu129-ubuntu-2404-nvidia-580'",
        ),
        ("regional-quota", "✗ GPU quota us-central1", "request PREEMPTIBLE_NVIDIA_L4_GPUS ≥ 1"),
        ("global-quota", "✗ GPUS_ALL_REGIONS: 0", "request GPUS_ALL_REGIONS ≥ 1"),
        ("missing-bucket", "✗ bucket gs://bench-no-such-bucket", "run `bench setup`"),
        (
            "vm-bucket-access",
            f"✗ VM bucket access: bench-signer@{PROJECT}.iam.gserviceaccount.com holds no "
            "benchRunObjects role",
            "run `bench setup --apply`",
        ),
        (
            "missing-image",
            "✗ image family pytorch-9-9-cu999-ubuntu-2204-nvidia-999: no image in family",
            "set `image_family`/`image_project` to a family that exists",
        ),
        (
            "no-create",
            f"✗ create VMs: you lack compute.instances.create in {PROJECT}",
            f"ask a project admin for roles/compute.instanceAdmin.v1 on {PROJECT}",
        ),
        (
            "no-act-as",
            f"✗ act as the VM account: you lack iam.serviceAccounts.actAs on {ACCOUNT}",
            f"gcloud iam service-accounts add-iam-policy-binding {ACCOUNT} "
            "--member=user:YOUR_EMAIL --role=roles/iam.serviceAccountUser",
        ),
        (
            "no-self-delete",
            f"✗ VM self-delete: {ACCOUNT} holds no projects/{PROJECT}/roles/{SELF_DELETE_ROLE_ID}",
            "run `bench setup --apply`",
        ),
        (
            "old-self-delete-role",
            "✗ VM self-delete: projects/bench-test-project/roles/benchSelfDelete lacks "
            "compute.disks.delete",
            "run `bench setup --apply` (it updates the role)",
        ),
        (
            "external-ip-denied",
            "✗ org policies: compute.vmExternalIpAccess lets no new VM have an external IP",
            f"ask an organization policy administrator to change the policy for {PROJECT}",
        ),
        (
            "untrusted-image-project",
            "✗ org policies: compute.trustedImageProjects does not trust "
            "projects/deeplearning-platform-release",
            f"ask an organization policy administrator to change the policy for {PROJECT}",
        ),
        (
            "default-account",
            "✗ VM self-delete: the default account cannot delete its VM",
            "run `bench setup --apply`, then set service_account",
        ),
    ],
)
def test_each_broken_thing_is_exactly_one_cross_naming_its_fix(
    project, monkeypatch, capsys, what, cross, fix
):
    _break(project, monkeypatch, what)
    code, _, crosses = doctor(capsys)
    assert code == 4
    (line,) = crosses
    assert line.startswith(cross) and f"fix: {fix}" in line
    assert not project.calls("instances.insert")


def test_doctor_checks_every_requested_gpu_type(project, capsys):
    assert main(["doctor", "--gpu", "l4,t4,a100,h100"]) == 0
    out = capsys.readouterr().out
    assert "✗" not in out
    for metric in ("NVIDIA_L4_GPUS", "NVIDIA_T4_GPUS", "NVIDIA_A100_GPUS", "NVIDIA_H100_GPUS"):
        assert f"PREEMPTIBLE_{metric} 8 free" in out
    project.catalog.zones_without["nvidia-h100-80gb"] = {"us-central1-b"}
    project.catalog.set_region_quota("us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0.0)
    project.catalog.set_region_quota("us-central1", "NVIDIA_T4_GPUS", 0.0)
    assert main(["doctor", "--gpu", "t4,h100"]) == 4
    out = capsys.readouterr().out
    assert re.search(r"✗ zone us-central1-b: does not offer a3-highgpu-1g, nvidia-h100-80gb", out)
    assert re.search(r"✗ GPU quota us-central1: .*request PREEMPTIBLE_NVIDIA_T4_GPUS", out)


def test_quota_in_use_is_no_free_quota_and_a_region_without_quotas_is_unknown(project, capsys):
    """Quota `usage` counts against its `limit`, and a region whose quotas Compute could not
    load (`quotaStatusWarning`) is unknown, never 0
    (https://cloud.google.com/compute/docs/reference/rest/v1/regions)."""
    held = {"NVIDIA_L4_GPUS": 8.0, "PREEMPTIBLE_NVIDIA_L4_GPUS": 8.0}  # other VMs hold them all
    project.catalog.region_usage["us-central1"] = held
    assert main(["doctor"]) == 4
    out = capsys.readouterr().out
    assert re.search(r"✗ GPU quota us-central1: NVIDIA_L4_GPUS 0 free", out), out
    project.catalog.region_usage.clear()
    project.catalog.quota_warning_regions.add("us-central1")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "✓ GPU quota us-central1: unknown: Compute could not load" in out


def test_a_new_project_is_told_which_quota_to_request(project, capsys):
    """A new project has no GPU quota at all: GPUS_ALL_REGIONS 0 and 0 of each GPU per
    region (https://cloud.google.com/compute/resource-usage#gpu_quota). The stand-in
    answered 8 of everything before, and doctor said ✓ where Google would refuse."""
    project.catalog.region_quotas.clear()
    project.catalog.project_quotas["GPUS_ALL_REGIONS"] = 0.0
    assert main(["doctor"]) == 4
    crosses = [line for line in capsys.readouterr().out.splitlines() if line.startswith("✗")]
    assert len(crosses) == 2, crosses
    regional, overall = crosses
    assert regional.startswith("✗ GPU quota us-central1: NVIDIA_L4_GPUS 0 free")
    assert "fix: request PREEMPTIBLE_NVIDIA_L4_GPUS ≥ 1 in us-central1 at " in regional
    assert overall.startswith("✗ GPUS_ALL_REGIONS: 0 free")
    assert "fix: request GPUS_ALL_REGIONS ≥ 1" in overall


def test_without_credentials_the_fix_is_said_once_and_every_unasked_check_is_listed(
    project, monkeypatch, capsys
):
    """Issue 52: the credentials line said its fix twice, and the checks it stopped before
    were not listed."""
    _break(project, monkeypatch, "credentials")
    assert main(["doctor"]) == 4
    out = capsys.readouterr().out
    assert out.count("gcloud auth application-default login") == 1
    not_run = [line for line in out.splitlines() if line.endswith("not run: needs credentials")]
    names = [line.removeprefix("- ").split(":")[0] for line in not_run]
    assert names[:2] == ["project", "Compute API"] and "GPU quota" in names
    assert any(name.startswith("permissions") for name in names)


def test_doctor_names_the_org_policies_it_could_not_read(project, capsys):
    """Reading an effective org policy needs orgpolicy.policy.get: without it doctor says
    which constraints it could not read, and how to be able to, without a cross."""
    _controller_holds(
        project,
        set(PREDEFINED_ROLES["roles/compute.instanceAdmin.v1"])
        | _POLICY_READER
        | {"iam.serviceAccounts.actAs"},
    )
    code, ticks, crosses = doctor(capsys)
    assert code == 0 and crosses == []
    (line,) = [t for t in ticks if t.startswith("✓ org policies")]
    for constraint in (
        "compute.vmExternalIpAccess",
        "compute.skipDefaultNetworkCreation",
        "compute.trustedImageProjects",
        "iam.disableServiceAccountCreation",
    ):
        assert constraint in line.split("could not read ", 1)[1]
    assert "orgpolicy.policy.get" in line and "roles/orgpolicy.policyViewer" in line
