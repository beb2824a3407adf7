"""The pure check builders of `bench doctor` and launch's cheap checks."""

from __future__ import annotations

from orchestrator.backends.gce.readiness import (
    GpuShape,
    global_quota_check,
    image_check,
    quotas_of,
    region_quota_check,
    vm_access_check,
    zone_check,
)

L4 = [GpuShape("g2-standard-4", "nvidia-l4", 1)]


def test_quota_metrics_follow_the_accelerator_name():
    assert L4[0].quota_metric == "NVIDIA_L4_GPUS"
    assert GpuShape("n1-standard-4", "nvidia-tesla-t4", 1).quota_metric == "NVIDIA_T4_GPUS"
    assert GpuShape("a2-highgpu-1g", "nvidia-tesla-a100", 1).quota_metric == "NVIDIA_A100_GPUS"
    assert GpuShape("a3-highgpu-1g", "nvidia-h100-80gb", 1).quota_metric == "NVIDIA_H100_GPUS"


def test_spot_uses_preemptible_quota_or_else_the_standard_one():
    only_standard = {"NVIDIA_L4_GPUS": 1.0, "PREEMPTIBLE_NVIDIA_L4_GPUS": 0.0}
    assert region_quota_check("r", only_standard, L4, spot=True, on_demand=False).ok
    none = {"NVIDIA_L4_GPUS": 0.0, "PREEMPTIBLE_NVIDIA_L4_GPUS": 0.0}
    check = region_quota_check("r", none, L4, spot=True, on_demand=False)
    assert not check.ok and "PREEMPTIBLE_NVIDIA_L4_GPUS ≥ 1 in r" in check.fix
    preemptible_only = {"PREEMPTIBLE_NVIDIA_L4_GPUS": 4.0}
    check = region_quota_check("r", preemptible_only, L4, spot=True, on_demand=True)
    assert not check.ok and "request NVIDIA_L4_GPUS" in check.fix  # the on-demand fallback


def test_several_gpu_shapes_are_judged_together():
    shapes = [*L4, GpuShape("n1-standard-4", "nvidia-tesla-t4", 1)]
    check = region_quota_check("r", {"NVIDIA_L4_GPUS": 1.0}, shapes, spot=False, on_demand=True)
    assert not check.ok and "NVIDIA_T4_GPUS" in check.fix
    assert "NVIDIA_L4_GPUS 1" in check.detail


def test_global_quota_and_zones():
    assert not global_quota_check({}, L4).ok
    assert global_quota_check({"GPUS_ALL_REGIONS": 1.0}, L4).ok
    assert zone_check("z", True, []).ok
    assert "does not offer nvidia-l4" in zone_check("z", True, ["nvidia-l4"]).detail
    assert zone_check("z", False, []).detail == "no such zone"


def test_image_checks_name_the_successor():
    active = {"name": "img-v2"}
    assert image_check("p", "fam", active, []).ok
    deprecated = {
        "name": "img-v1",
        "deprecated": {"state": "DEPRECATED", "replacement": "https://x/global/images/family/fam2"},
    }
    check = image_check("p", "fam", None, [deprecated])
    assert not check.ok and "successor is fam2" in check.detail
    assert check.fix == "set image_family = 'fam2' in bench.toml"
    assert "no image in family" in image_check("p", "fam", None, []).detail
    assert not image_check("p", "fam", deprecated, []).ok  # a resolved but deprecated image


def test_vm_access_fails_while_the_vm_account_holds_any_object_role():
    """Every name is public: an object role of the VM account reaches every run."""
    vm, signer = {"serviceAccount:a@p"}, {"serviceAccount:s@p"}
    for role in ("roles/storage.objectViewer", "roles/storage.objectUser"):
        check = vm_access_check(
            "b", "a@p", "s@p", {role: vm, "projects/p/roles/benchRunObjects": signer}
        )
        assert not check.ok and "every other run's objects" in check.detail
    old_setup = {"projects/p/roles/benchRunObjects": vm | signer}
    assert not vm_access_check("b", "a@p", "s@p", old_setup).ok


def test_vm_access_needs_the_signer_to_hold_the_run_objects_role():
    assert not vm_access_check("b", "a@p", "s@p", {}).ok
    contained = vm_access_check(
        "b", "a@p", "s@p", {"projects/p/roles/benchRunObjects": {"serviceAccount:s@p"}}
    )
    assert contained.ok and "holds no role on the run objects" in contained.detail


def test_quotas_are_what_is_free_and_unknown_when_compute_could_not_load_them():
    region = {"quotas": [{"metric": "NVIDIA_L4_GPUS", "limit": 8.0, "usage": 6.0}]}
    assert quotas_of(region) == {"NVIDIA_L4_GPUS": 2.0}
    assert quotas_of({"quotaStatusWarning": {"code": "UNREACHABLE"}}) is None
    assert region_quota_check("r", None, [], True, False).ok
    assert "unknown" in global_quota_check(None, []).detail
