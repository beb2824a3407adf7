"""`bench doctor` against the compute stand-in and fake-gcs-server behind the IAM proxy:
all ✓ on a healthy project; each broken thing gives exactly one ✗ line naming its fix."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import main
from orchestrator.config import BenchConfig
from tests.fakes.compute_state import project_number
from tests.fakes.gcs_proxy import GcsIamProxy

pytestmark = pytest.mark.timeout(60)
PROJECT = "bench-test-project"
DEFAULT_ACCOUNT = f"{project_number(PROJECT)}-compute@developer.gserviceaccount.com"
FAMILY = BenchConfig().image_family


@pytest.fixture
def project(gce, gcs_server, monkeypatch):
    """A healthy project: the VM's default account holds object access on the bucket."""
    with GcsIamProxy(gcs_server.endpoint, gce.account_of_token) as proxy:
        proxy.grant(f"serviceAccount:{DEFAULT_ACCOUNT}")
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        gce.proxy = proxy
        yield gce


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


def test_a_healthy_project_is_all_ticks(project, gcs_bucket, capsys):
    code, ticks, crosses = doctor(capsys)
    assert code == 0 and crosses == []
    names = [line.split(": ")[0] for line in ticks]
    assert names == [
        "✓ credentials",
        "✓ project",
        "✓ Compute API",
        "✓ zone us-central1-a",
        "✓ zone us-central1-b",
        "✓ zone us-central1-c",
        f"✓ image family {FAMILY}",
        "✓ GPU quota us-central1",
        "✓ GPUS_ALL_REGIONS",
        f"✓ bucket gs://{gcs_bucket}",
        "✓ VM bucket access",
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
            f"✗ VM bucket access: {DEFAULT_ACCOUNT}",
            "run `bench setup` (its account writes only its own run's objects)",
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
