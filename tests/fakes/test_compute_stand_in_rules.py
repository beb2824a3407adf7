"""The compute stand-in refuses what Google refuses (each rule's page is cited beside it in
tests/fakes/insert_rules.py and compute_server.py), driven by the real client. Every test
here passed a request the stand-in used to accept, or read a value it did not serve."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from tests.fakes.compute_server import FakeComputeServer
from tests.fakes.fixtures import compute_client_options
from tests.fakes.test_compute_stand_in import PROJECT, ZONE, make_instance, wait_operation

IMAGE_FAMILY = "projects/deeplearning-platform-release/global/images/family/"
FAMILY = "common-cu129-ubuntu-2204-nvidia-580"


@pytest.fixture
def server():
    with FakeComputeServer(run_scripts=False) as fake:
        yield fake


@pytest.fixture
def instances(server):
    return compute_v1.InstancesClient(**compute_client_options(server))


@pytest.fixture
def operations(server):
    return compute_v1.ZoneOperationsClient(**compute_client_options(server))


def insert(instances, instance: compute_v1.Instance, zone: str = ZONE):
    return instances.insert(project=PROJECT, zone=zone, instance_resource=instance)


def with_boot_disk(instance: compute_v1.Instance, family: str, size_gb: int | None):
    params = compute_v1.AttachedDiskInitializeParams(source_image=IMAGE_FAMILY + family)
    if size_gb is not None:
        params.disk_size_gb = size_gb
    instance.disks = [
        compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=params)
    ]
    return instance


def test_metadata_values_and_their_sum_are_bounded(server, instances):
    server.catalog.raise_gpu_quotas()
    big = "x" * (256 * 1024)
    insert(instances, make_instance("at-limit", big))  # 256 KiB is allowed
    with pytest.raises(exceptions.BadRequest, match="at most 262144 bytes"):
        insert(instances, make_instance("over", big + "x"))
    third = make_instance("sum", big[:200_000], shutdown_script=big[:200_000])
    third.metadata.items.append(compute_v1.Items(key="extra", value=big[:200_000]))
    with pytest.raises(exceptions.BadRequest, match="at most 524288 bytes"):
        insert(instances, third)


def test_accelerators_must_match_the_machine_shape(server, instances):
    server.catalog.raise_gpu_quotas()
    two = make_instance("two-l4")
    two.guest_accelerators[0].accelerator_count = 2
    with pytest.raises(exceptions.BadRequest, match="comes with 1 nvidia-l4"):
        insert(instances, two)
    t4 = make_instance("t4-on-g2")
    t4.guest_accelerators[0].accelerator_type = f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4"
    with pytest.raises(exceptions.BadRequest, match="comes with 1 nvidia-l4"):
        insert(instances, t4)
    n1 = make_instance("n1-three")
    n1.machine_type = f"zones/{ZONE}/machineTypes/n1-standard-4"
    n1.guest_accelerators[0].accelerator_type = f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4"
    n1.guest_accelerators[0].accelerator_count = 3
    with pytest.raises(exceptions.BadRequest, match="acceleratorCount"):
        insert(instances, n1)
    micro = make_instance("micro-gpu")
    micro.machine_type = f"zones/{ZONE}/machineTypes/e2-micro"
    with pytest.raises(exceptions.BadRequest, match="does not take this accelerator"):
        insert(instances, micro)
    n1.guest_accelerators[0].accelerator_count = 1
    insert(instances, n1)
    insert(instances, make_instance("one-l4"))


def test_max_run_duration_is_between_30_seconds_and_120_days(server, instances):
    server.catalog.raise_gpu_quotas()
    for seconds in (29, 120 * 86400 + 1):
        with pytest.raises(exceptions.BadRequest, match="maxRunDuration"):
            insert(instances, make_instance(f"run-{seconds}", max_run_s=seconds))
    insert(instances, make_instance("run-30", max_run_s=30))


def test_gpu_and_spot_vms_cannot_live_migrate_and_spot_ones_do_not_restart(server, instances):
    server.catalog.raise_gpu_quotas()
    migrating = make_instance("migrating")
    migrating.scheduling.on_host_maintenance = "MIGRATE"
    with pytest.raises(exceptions.BadRequest, match="Spot VMs do not support live migration"):
        insert(instances, migrating)
    standard = make_instance("standard-gpu")
    standard.scheduling = compute_v1.Scheduling(provisioning_model="STANDARD")  # MIGRATE
    with pytest.raises(exceptions.BadRequest, match="guest accelerators do not support"):
        insert(instances, standard)
    restarting = make_instance("restarting")
    restarting.scheduling.automatic_restart = True
    with pytest.raises(exceptions.BadRequest, match="cannot be restarted automatically"):
        insert(instances, restarting)


def test_the_image_must_exist_and_the_disk_hold_it(server, instances):
    server.catalog.raise_gpu_quotas()
    with pytest.raises(exceptions.NotFound, match="family/no-such-family"):
        insert(instances, with_boot_disk(make_instance("no-image"), "no-such-family", None))
    with pytest.raises(exceptions.BadRequest, match=r"smaller than the image size \(50 GB\)"):
        insert(instances, with_boot_disk(make_instance("small-disk"), FAMILY, 20))
    insert(instances, with_boot_disk(make_instance("image-size"), FAMILY, 50))
    insert(instances, with_boot_disk(make_instance("default-size"), FAMILY, None))


def test_the_caller_must_be_allowed_to_act_as_the_vms_account(server, instances):
    server.catalog.raise_gpu_quotas()
    policy = server.iam.policy(PROJECT)
    policy["bindings"] = [
        {"role": "roles/compute.instanceAdmin.v1", "members": ["user:bench-user@example.com"]}
    ]
    with pytest.raises(exceptions.BadRequest, match="does not have access to service account"):
        insert(instances, make_instance("no-act-as"))
    policy["bindings"].append(
        {"role": "roles/iam.serviceAccountUser", "members": ["user:bench-user@example.com"]}
    )
    insert(instances, make_instance("act-as"))


def test_a_new_project_has_no_gpu_quota_and_running_vms_use_it(server, instances, operations):
    """New projects start at 0 (https://cloud.google.com/compute/resource-usage#gpu_quota);
    a running VM holds its GPUs, a TERMINATED one none."""
    failed = wait_operation(operations, insert(instances, make_instance("first")).name)
    assert failed.error.errors[0].code == "QUOTA_EXCEEDED"
    assert "NVIDIA_L4_GPUS" in failed.error.errors[0].message
    server.catalog.raise_gpu_quotas(limit=1.0)
    assert not wait_operation(operations, insert(instances, make_instance("one")).name).error
    regions = compute_v1.RegionsClient(**compute_client_options(server))
    usage = {q.metric: q.usage for q in regions.get(project=PROJECT, region="us-central1").quotas}
    assert usage["PREEMPTIBLE_NVIDIA_L4_GPUS"] == 1
    over = wait_operation(operations, insert(instances, make_instance("two")).name)
    assert over.error.errors[0].code == "QUOTA_EXCEEDED"
    wait_operation(operations, instances.stop(project=PROJECT, zone=ZONE, instance="one").name)
    assert not wait_operation(operations, insert(instances, make_instance("three")).name).error


def test_the_metadata_server_says_whether_the_vm_is_spot(server, instances, operations):
    server.catalog.raise_gpu_quotas()
    spot = make_instance("spot-vm")
    standard = make_instance("standard-vm")
    standard.scheduling = compute_v1.Scheduling(
        provisioning_model="STANDARD", on_host_maintenance="TERMINATE"
    )
    for instance in (spot, standard):
        wait_operation(operations, insert(instances, instance).name)
    for name, expected in (("spot-vm", "TRUE"), ("standard-vm", "FALSE")):
        url = f"{server.metadata_url_for(ZONE, name)}/instance/scheduling/preemptible"
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.read().decode() == expected


def test_a_vms_own_delete_needs_the_disk_permission_too(server, instances, operations):
    """Deleting a VM deletes its auto-delete boot disk (named after the VM): a role holding
    compute.instances.delete alone is refused on the disk (the stricter reading bench
    grants for, backends/gce/iam.py)."""
    server.catalog.raise_gpu_quotas()
    account = "bench-vm@p.iam.gserviceaccount.com"
    vm = with_boot_disk(make_instance("bench-own"), FAMILY, None)
    vm.service_accounts = [
        compute_v1.ServiceAccount(email=account, scopes=["https://www.googleapis.com/auth/compute"])
    ]
    wait_operation(operations, insert(instances, vm).name)
    server.iam.grant_self_delete(PROJECT, account)
    role = next(iter(server.iam.roles.values()))
    role["includedPermissions"] = ["compute.instances.delete"]
    url = f"{server.endpoint}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/bench-own"
    token = {"Authorization": "Bearer fake-token-bench-own"}
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=token))
    assert refused.value.code == 403
    message = json.loads(refused.value.read())["error"]["message"]
    assert message == (
        f"Required 'compute.disks.delete' permission for "
        f"'projects/{PROJECT}/zones/{ZONE}/disks/bench-own'"
    )
    role["includedPermissions"] = ["compute.instances.delete", "compute.disks.delete"]
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=token)):
        pass
    server.wait_for_status(ZONE, "bench-own", "DELETED")
