"""build_instance and the name/label rules: pure, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.backends.gce.builder import (
    STORAGE_SCOPE,
    build_instance,
    is_valid_resource_name,
    label_filter,
    validate_labels,
)
from orchestrator.config import BenchConfig
from orchestrator.errors import UsageError
from orchestrator.spec import RunSpec
from orchestrator.users import owner_label, sanitize_label_value
from results_schema import Plan

PLANS = Path(__file__).resolve().parents[2] / "benches" / "plans"


def make_spec(**overrides) -> RunSpec:
    plan = Plan.model_validate(json.loads((PLANS / "default.json").read_text()))
    fields = {
        "run_id": "20261101-120000-abcdef",
        "backend": "gce",
        "plan": plan,
        "owner": "Ada.Lovelace@Example.com",
        "budget_usd": 1.0,
        "rate_usd_per_hour": 0.30,
        "max_run_seconds": 11_880,
        "estimated_seconds": 900,
        "payload_sha256": "0" * 64,
        "spot": True,
    }
    fields.update(overrides)
    return RunSpec(**fields)


def make_config(**overrides) -> BenchConfig:
    return BenchConfig(project="bench-test-project", bucket="bench-bucket", **overrides)


def build(spot: bool = True, **config_overrides):
    return build_instance(
        make_spec(),
        make_config(**config_overrides),
        "us-central1-b",
        "#!/bin/bash\necho start\n",
        "#!/bin/bash\necho stop\n",
        spot,
    )


@pytest.mark.slow
def test_scheduling_caps_the_run_in_the_cloud():
    scheduling = build().scheduling
    assert scheduling.provisioning_model == "SPOT"
    assert scheduling.instance_termination_action == "DELETE"
    assert scheduling.max_run_duration.seconds == 11_880
    assert scheduling.on_host_maintenance == "TERMINATE"
    assert scheduling.automatic_restart is False


def test_on_demand_is_standard_with_the_same_caps():
    scheduling = build(spot=False).scheduling
    assert scheduling.provisioning_model == "STANDARD"
    assert scheduling.instance_termination_action == "DELETE"
    assert scheduling.automatic_restart is False


def test_machine_gpu_disk_and_network_are_zonal_and_from_config():
    instance = build(disk_gb=150)
    assert instance.name == "bench-20261101-120000-abcdef"
    assert instance.machine_type == "zones/us-central1-b/machineTypes/g2-standard-4"
    (gpu,) = instance.guest_accelerators
    assert gpu.accelerator_type == "zones/us-central1-b/acceleratorTypes/nvidia-l4"
    assert gpu.accelerator_count == 1
    (disk,) = instance.disks
    assert disk.boot and disk.auto_delete
    assert disk.initialize_params.source_image == (
        "projects/deeplearning-platform-release/global/images/family/"
        "pytorch-2-9-cu129-ubuntu-2204-nvidia-580"
    )
    assert disk.initialize_params.disk_size_gb == 150
    assert disk.initialize_params.disk_type == "zones/us-central1-b/diskTypes/pd-balanced"
    (nic,) = instance.network_interfaces
    assert nic.network == "global/networks/default"
    assert nic.access_configs[0].type_ == "ONE_TO_ONE_NAT"


def test_by_default_the_boot_disk_is_sized_as_its_image():
    # No diskSizeGb: GCE then uses the image's size, the smallest the image allows (compute
    # v1 discovery document, AttachedDiskInitializeParams.diskSizeGb).
    (disk,) = build().disks
    assert "disk_size_gb" not in disk.initialize_params


def test_three_labels_with_a_sanitized_owner():
    assert dict(build().labels) == {
        "bench-managed": "true",
        "bench-run": "20261101-120000-abcdef",
        "bench-owner": "ada-lovelace-example-com",
    }


def test_the_default_account_gets_only_the_storage_scope():
    (account,) = build().service_accounts
    assert account.email == "default"
    assert list(account.scopes) == [STORAGE_SCOPE]


def test_the_dedicated_account_adds_the_compute_scope_to_delete_itself():
    (account,) = build(service_account="bench-vm@p.iam.gserviceaccount.com").service_accounts
    assert account.email == "bench-vm@p.iam.gserviceaccount.com"
    assert list(account.scopes) == [STORAGE_SCOPE, "https://www.googleapis.com/auth/compute"]


@pytest.mark.parametrize("account", ["default", "bench-vm@p.iam.gserviceaccount.com"])
@pytest.mark.parametrize("spot", [True, False])
def test_every_insert_body_fits_the_compute_discovery_schema(account, spot):
    from google.cloud import compute_v1
    from google.protobuf import json_format

    from tests.fakes import discovery

    instance = build(spot=spot, service_account=account)
    # What the REST transport sends: camelCase, int64 as strings, no empty defaults.
    body = json_format.MessageToDict(compute_v1.Instance.pb(instance))
    discovery.validate("compute", "v1", "Instance", body)
    body["unknownField"] = 1
    with pytest.raises(discovery.DiscoveryError, match="unknown field 'unknownField'"):
        discovery.validate("compute", "v1", "Instance", body)


def test_metadata_holds_the_two_scripts_and_nothing_secret():
    from google.cloud import compute_v1

    instance = build()
    items = {item.key: item.value for item in instance.metadata.items}
    assert items == {
        "startup-script": "#!/bin/bash\necho start\n",
        "shutdown-script": "#!/bin/bash\necho stop\n",
    }
    body = json.dumps(compute_v1.Instance.to_dict(instance)).lower()
    for secret in ("access_token", "private_key", "client_secret", "password", "bearer"):
        assert secret not in body


@pytest.mark.parametrize(
    "name, ok",
    [
        ("bench-20261101-120000-abcdef", True),
        ("a", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("1bench", False),
        ("bench-", False),
        ("Bench", False),
        ("bench_run", False),
        ("", False),
        ("bench-x\n", False),  # `$` matches before a final newline: the whole name must match
    ],
)
def test_resource_names(name, ok):
    assert is_valid_resource_name(name) is ok


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("ada", "ada"),
        ("Ada Lovelace", "ada-lovelace"),
        ("ada@example.com", "ada-example-com"),
        ("--", "unknown"),
        ("", "unknown"),
        ("x" * 80, "x" * 63),
        ("ünïcode_name", "n-code_name"),
    ],
)
def test_sanitize_label_value(raw, clean):
    assert sanitize_label_value(raw) == clean
    validate_labels({"bench-owner": sanitize_label_value(raw)})
    # One rule: the owner recorded in the spec is the label the VM gets.
    assert owner_label(raw) == clean if raw else owner_label(raw)


@pytest.mark.parametrize(
    "labels",
    [
        {"Bench-managed": "true"},
        {"1key": "v"},
        {"bench-run": "UPPER"},
        {"bench-run": "has space"},
        {"bench-run": "x" * 64},
        {"bench-run": "run\n"},
        {"bench-run\n": "v"},
        {f"k{i}": "v" for i in range(65)},
    ],
)
def test_invalid_labels_are_refused(labels):
    with pytest.raises(UsageError):
        validate_labels(labels)


def test_label_filter():
    assert label_filter("bench-managed", "true") == 'labels.bench-managed = "true"'
    with pytest.raises(UsageError):
        label_filter("bench-managed", 'true" OR name = "x')


def test_invalid_names_fail_before_any_request():
    # The config refuses these first (tests/unit/test_input_validation.py); the builder
    # checks again whatever reaches it, so it is handed them past the config's validation.
    for setting, value in (("image_family", "Not_A_Family"), ("accelerator_type", "NVIDIA L4")):
        config = make_config().model_copy(update={setting: value})
        with pytest.raises(UsageError, match=setting.replace("_", " ")):
            build_instance(make_spec(), config, "us-central1-b", "#!/bin/bash\n", "", True)
    spec = make_spec()
    with pytest.raises(UsageError, match="256 KiB"):
        build_instance(spec, make_config(), "us-central1-a", "x" * 300_000, "", True)
