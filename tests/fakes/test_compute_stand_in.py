"""The compute stand-in, driven by the real google-cloud-compute client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from tests.fakes import fixtures
from tests.fakes.compute_server import FakeComputeServer
from tests.fakes.fixtures import compute_client_options
from tests.limits import HANG_SECONDS

# A plain fixture from tests/fakes/fixtures.py (a conftest may import it for every test).
compute_server = fixtures.compute_server

PROJECT = "test-project"
ZONE = "us-central1-a"
DONE = compute_v1.Operation.Status.DONE


@pytest.fixture
def clients(
    compute_server: FakeComputeServer,
) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
    kwargs = compute_client_options(compute_server)
    compute_server.catalog.raise_gpu_quotas()  # a new project has none
    return compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(**kwargs)


def make_instance(
    name: str,
    script: str | None = None,
    *,
    zone: str = ZONE,
    action: str = "DELETE",
    max_run_s: int = 3600,
    labels: dict[str, str] | None = None,
    shutdown_script: str | None = None,
) -> compute_v1.Instance:
    items = []
    if script is not None:
        items.append(compute_v1.Items(key="startup-script", value=script))
    if shutdown_script is not None:
        items.append(compute_v1.Items(key="shutdown-script", value=shutdown_script))
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/g2-standard-4",
        labels={"bench-managed": "true", "bench-run": name} if labels is None else labels,
        scheduling=compute_v1.Scheduling(
            provisioning_model="SPOT",
            instance_termination_action=action,
            max_run_duration=compute_v1.Duration(seconds=max_run_s),
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
        ),
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_count=1, accelerator_type=f"zones/{zone}/acceleratorTypes/nvidia-l4"
            )
        ],
        metadata=compute_v1.Metadata(items=items),
        service_accounts=[
            compute_v1.ServiceAccount(
                email="default", scopes=["https://www.googleapis.com/auth/devstorage.read_write"]
            )
        ],
    )


def wait_operation(
    ops: compute_v1.ZoneOperationsClient, name: str, zone: str = ZONE
) -> compute_v1.Operation:
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        op = ops.wait(project=PROJECT, zone=zone, operation=name)
        if op.status == DONE:
            return op
    raise TimeoutError(name)


# An instance's statuses before it starts (its life cycle:
# https://cloud.google.com/compute/docs/instances/instance-life-cycle).
NOT_STARTED = ("PROVISIONING", "STAGING")


def wait_status(
    instances: compute_v1.InstancesClient, name: str, status: str, zone: str = ZONE
) -> compute_v1.Instance:
    return wait_instance(instances, name, lambda seen: seen == status, status, zone)


def wait_instance(
    instances: compute_v1.InstancesClient, name: str, wanted, what: str, zone: str = ZONE
) -> compute_v1.Instance:
    """The instance once `wanted(its status)` holds at a look (every 20 ms)."""
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        inst = instances.get(project=PROJECT, zone=zone, instance=name)
        if wanted(inst.status):
            return inst
        time.sleep(0.02)
    raise TimeoutError(f"{name} never {what}")


def create(clients, name: str, script: str | None = None, **kwargs) -> compute_v1.Instance:
    """Inserts an instance and waits until it has started: its status past PROVISIONING and
    STAGING. That is RUNNING unless the VM went down by itself between two looks (a guest's
    `shutdown -h now`, a short max run duration at a fast clock): then STOPPING or later. A
    wait for RUNNING itself missed such a VM and waited for the hang bound (a suite run under
    load, issue 31)."""
    instances, ops = clients
    zone = kwargs.get("zone", ZONE)
    op = instances.insert(
        project=PROJECT, zone=zone, instance_resource=make_instance(name, script, **kwargs)
    )
    assert not wait_operation(ops, op.name, zone).error.errors
    return wait_instance(instances, name, lambda seen: seen not in NOT_STARTED, "started", zone)


def serial_output(instances: compute_v1.InstancesClient, name: str) -> str:
    text, start = "", 0
    while True:
        out = instances.get_serial_port_output(
            request=compute_v1.GetSerialPortOutputInstanceRequest(
                project=PROJECT, zone=ZONE, instance=name, port=1, start=start
            )
        )
        text += out.contents
        if out.next_ == start:
            return text
        start = out.next_


def test_insert_boot_list_delete(compute_server, clients):
    instances, ops = clients
    create(clients, "bench-a", "echo hello from the vm; echo payload > result.txt")
    create(clients, "other", "true", zone="us-central1-b", labels={"team": "x"})

    sent = compute_server.inserted[0]
    assert sent["scheduling"]["maxRunDuration"] == {"seconds": "3600"}
    assert sent["scheduling"]["provisioningModel"] == "SPOT"
    assert sent["scheduling"]["instanceTerminationAction"] == "DELETE"

    compute_server.wait_for(
        lambda: "finished with exit status 0" in serial_output(instances, "bench-a")
    )
    assert "startup-script: hello from the vm" in serial_output(instances, "bench-a")
    assert (
        compute_server.instance(ZONE, "bench-a").workdir / "result.txt"
    ).read_text() == "payload\n"

    request = compute_v1.AggregatedListInstancesRequest(
        project=PROJECT, filter='labels.bench-managed = "true"'
    )
    found = {
        (scope, i.name)
        for scope, scoped in instances.aggregated_list(request=request)
        for i in scoped.instances
    }
    assert found == {(f"zones/{ZONE}", "bench-a")}

    op = instances.delete(project=PROJECT, zone=ZONE, instance="bench-a")
    assert wait_operation(ops, op.name).operation_type == "delete"
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="bench-a")


def test_serial_output_from_offset(compute_server, clients):
    instances, _ = clients
    create(clients, "serial", "echo one; echo two")
    compute_server.wait_for(lambda: "exit status" in compute_server.serial_output(ZONE, "serial"))
    whole = instances.get_serial_port_output(project=PROJECT, zone=ZONE, instance="serial")
    tail = instances.get_serial_port_output(
        request=compute_v1.GetSerialPortOutputInstanceRequest(
            project=PROJECT, zone=ZONE, instance="serial", port=1, start=10
        )
    )
    assert tail.start == 10 and tail.next_ == whole.next_ == len(whole.contents.encode())
    assert whole.contents[10:] == tail.contents


def test_filters_and_paging(compute_server, clients):
    instances, _ = clients
    for name in ("bench-1", "bench-2", "bench-3"):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance(name))
    instances.insert(
        project=PROJECT,
        zone=ZONE,
        instance_resource=make_instance("plain", labels={"bench-managed": "false"}),
    )

    def names(filter_: str, page_size: int = 500) -> set[str]:
        request = compute_v1.AggregatedListInstancesRequest(
            project=PROJECT, filter=filter_, max_results=page_size
        )
        return {i.name for _, s in instances.aggregated_list(request=request) for i in s.instances}

    assert names("labels.bench-managed = true", page_size=1) == {"bench-1", "bench-2", "bench-3"}
    assert names('labels.bench-managed != "true"') == {"plain"}
    assert names('(labels.bench-managed = "true") (name = "bench-2")') == {"bench-2"}
    listed = instances.list(
        request=compute_v1.ListInstancesRequest(
            project=PROJECT, zone=ZONE, filter="labels.bench-run = bench-3"
        )
    )
    assert [i.name for i in listed] == ["bench-3"]
    with pytest.raises(exceptions.BadRequest):
        names("name = a OR name = b")


def test_stockout_as_http_error(compute_server, clients):
    instances, _ = clients
    compute_server.faults.stockout(ZONE, "ZONE_RESOURCE_POOL_EXHAUSTED", via="http")
    with pytest.raises(exceptions.ServiceUnavailable) as caught:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("s"))
    assert caught.value.errors[0]["reason"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    # Another zone still has capacity.
    create(clients, "s", zone="us-central1-b")


def test_stockout_as_failed_operation(compute_server, clients):
    instances, ops = clients
    compute_server.faults.stockout(ZONE, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("s"))
    done = wait_operation(ops, op.name)
    assert done.http_error_status_code == 503
    assert done.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    # What ExtendedOperation.result() would raise, built from the polled operation.
    error = exceptions.from_http_status(
        done.http_error_status_code, done.http_error_message, errors=list(done.error.errors)
    )
    assert isinstance(error, exceptions.ServiceUnavailable)
    assert error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    assert str(error).startswith("503 SERVICE UNAVAILABLE")
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="s")


def test_machine_type_missing_and_quota(compute_server, clients):
    instances, _ = clients
    compute_server.faults.missing_machine_type("us-central1-c")
    with pytest.raises(exceptions.BadRequest, match="does not exist in zone"):
        instances.insert(
            project=PROJECT,
            zone="us-central1-c",
            instance_resource=make_instance("q", zone="us-central1-c"),
        )
    compute_server.faults.quota_exceeded("GPUS_ALL_REGIONS", via="http")
    with pytest.raises(exceptions.Forbidden, match="GPUS_ALL_REGIONS") as caught:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("q"))
    assert caught.value.errors[0]["reason"] == "quotaExceeded"


def test_transient_errors_and_latency(compute_server, clients):
    instances, _ = clients
    compute_server.faults.fail_next("instances.insert", status=429)
    with pytest.raises(exceptions.TooManyRequests):
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("t"))
    instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("t"))
    # GETs retry 503 on their own (default retry of the client).
    compute_server.faults.fail_next("instances.get", status=503, times=2)
    compute_server.faults.latency(0.2, "instances.get")
    started = time.monotonic()
    assert instances.get(project=PROJECT, zone=ZONE, instance="t").name == "t"
    assert time.monotonic() - started >= 0.6
    assert len(compute_server.calls("instances.get")) == 3


TERM_TRAP = """
trap 'echo "TERM preempted=$(curl -s -H "Metadata-Flavor: Google" \
"$BENCH_METADATA_ENDPOINT/instance/preempted")" > term.txt; exit 0' TERM
echo started
while true; do sleep 0.05; done
"""


def wait_started(server: FakeComputeServer, name: str, zone: str = ZONE) -> None:
    """The TERM trap is set once the script has printed "started"."""
    server.wait_for(lambda: "startup-script: started" in server.serial_output(zone, name))


def test_max_run_duration_deletes(compute_server, clients):
    instances, _ = clients
    create(clients, "backstop", TERM_TRAP, max_run_s=60)
    wait_started(compute_server, "backstop")
    compute_server.config.time_scale = 600  # from now on 60 simulated seconds take 0.1 s
    server_side = compute_server.wait_for_status(ZONE, "backstop", "DELETED")
    assert server_side.going_down_because == "maxRunDuration"
    assert (server_side.workdir / "term.txt").read_text() == "TERM preempted=FALSE\n"
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="backstop")


def test_max_run_duration_stops(compute_server, clients):
    # 60 simulated seconds in 10 ms: the VM is RUNNING for less than one look of create's.
    compute_server.config.time_scale = 6000
    create(clients, "stopper", "sleep 30", max_run_s=60, action="STOP")
    wait_status(clients[0], "stopper", "TERMINATED")
    stopped = compute_server.instance(ZONE, "stopper")
    assert stopped.going_down_because == "maxRunDuration" and not stopped.deleted
    assert "RUNNING" in stopped.status_history


def test_preemption(compute_server, clients):
    create(clients, "spot", TERM_TRAP, shutdown_script="echo shutdown-ran > shutdown.txt")
    wait_started(compute_server, "spot")
    compute_server.preempt(ZONE, "spot")
    gone = compute_server.wait_for_status(ZONE, "spot", "DELETED")
    assert gone.preempted and gone.going_down_because == "preemption"
    assert (gone.workdir / "term.txt").read_text() == "TERM preempted=TRUE\n"
    assert (gone.workdir / "shutdown.txt").read_text() == "shutdown-ran\n"


def test_preemption_at_time_kills_after_grace(compute_server, clients):
    compute_server.config.time_scale = 600
    compute_server.config.preemption_grace_s = 0.2
    create(
        clients, "stubborn", "trap '' TERM; echo up; while true; do sleep 0.05; done", action="STOP"
    )
    compute_server.preempt(ZONE, "stubborn", after_s=60)
    wait_status(clients[0], "stubborn", "TERMINATED")
    assert "powered off" in compute_server.serial_output(ZONE, "stubborn")


def test_guest_shutdown_terminates_without_delete(compute_server, clients):
    create(clients, "selfstop", "echo bye; shutdown -h now")
    wait_status(clients[0], "selfstop", "TERMINATED")
    inst = compute_server.instance(ZONE, "selfstop")
    assert inst.going_down_because == "guest" and not inst.deleted


def test_watchdog_shutdown(compute_server, clients):
    # "+1" minute is 1 s: time enough for `shutdown -c` to land first on a loaded machine
    # (at 0.1 s it once lost that race and the cancelled VM powered off).
    compute_server.config.time_scale = 60
    create(clients, "dog", "shutdown -h +1; sleep 30")
    create(clients, "cancelled", "shutdown -h +1; shutdown -c; sleep 30")
    wait_status(clients[0], "dog", "TERMINATED")
    time.sleep(0.5)
    assert compute_server.instance(ZONE, "cancelled").status == "RUNNING"


def test_stop_signals_the_script(compute_server, clients):
    instances, ops = clients
    create(clients, "stopme", TERM_TRAP)
    wait_started(compute_server, "stopme")
    op = instances.stop(project=PROJECT, zone=ZONE, instance="stopme")
    wait_operation(ops, op.name)
    assert instances.get(project=PROJECT, zone=ZONE, instance="stopme").status == "TERMINATED"
    assert (compute_server.instance(ZONE, "stopme").workdir / "term.txt").exists()


def metadata_get(url: str, flavor: bool = True) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"} if flavor else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_metadata_server(compute_server, clients):
    # A script rendered with the shared URL baked in, as the real one is.
    shared = compute_server.metadata_url
    script = f'curl -sf -H "Metadata-Flavor: Google" {shared}/instance/name > name.txt'
    create(clients, "meta-a", script)
    create(clients, "meta-b", script, zone="us-central1-b")
    for zone, name in ((ZONE, "meta-a"), ("us-central1-b", "meta-b")):
        compute_server.wait_for(
            lambda z=zone, n=name: "exit status" in compute_server.serial_output(z, n)
        )
        assert (compute_server.instance(zone, name).workdir / "name.txt").read_text() == name

    base = compute_server.metadata_url_for(ZONE, "meta-a")
    assert metadata_get(f"{base}/instance/name", flavor=False)[0] == 403
    assert metadata_get(f"{base}/instance/zone")[1].endswith(f"/zones/{ZONE}")
    assert metadata_get(f"{base}/instance/preempted")[1] == "FALSE"
    assert metadata_get(f"{base}/instance/attributes/startup-script")[1] == script
    assert metadata_get(f"{base}/instance/attributes/missing")[0] == 404
    assert metadata_get(f"{base}/project/project-id")[1] == PROJECT
    token = json.loads(metadata_get(f"{base}/instance/service-accounts/default/token")[1])
    assert token["token_type"] == "Bearer" and token["expires_in"] == 3599


# -- rules added from Google's documentation (URLs beside each rule in tests/fakes) ---------


def test_insert_answers_a_running_operation_that_completes_later(compute_server, clients):
    instances, ops = clients
    compute_server.config.provisioning_s = 0.5
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("slow"))
    assert op.status == compute_v1.Operation.Status.RUNNING
    assert wait_operation(ops, op.name).status == DONE


def test_wait_holds_up_to_its_limit_and_may_return_before_done(compute_server, clients):
    instances, ops = clients
    compute_server.config.provisioning_s = 5.0
    compute_server.config.operation_wait_s = 0.3  # GCE's 2 minutes, scaled
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("w"))
    started = time.monotonic()
    held = ops.wait(project=PROJECT, zone=ZONE, operation=op.name)
    assert time.monotonic() - started >= 0.25  # held up to its limit, however loaded the host
    assert held.status == compute_v1.Operation.Status.RUNNING  # and returned before DONE


def test_a_repeated_request_id_returns_the_first_operation(compute_server, clients):
    instances, _ = clients
    request = compute_v1.InsertInstanceRequest(
        project=PROJECT,
        zone=ZONE,
        instance_resource=make_instance("once"),
        request_id="5f0c9d3e-7f43-4b8c-9c38-2a3b7e8f1d20",
    )
    first = instances.insert_unary(request=request)
    again = instances.insert_unary(request=request)
    assert first.name == again.name
    assert [i.name for i in compute_server.instances()] == ["once"]


def test_quota_errors_arrive_inside_the_operation(compute_server, clients):
    instances, ops = clients
    compute_server.faults.quota_exceeded("NVIDIA_L4_GPUS", "us-central1", via="operation")
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("q"))
    done = wait_operation(ops, op.name)
    assert done.http_error_status_code == 403 and done.http_error_message == "FORBIDDEN"
    assert done.error.errors[0].code == "QUOTA_EXCEEDED"


def test_a_guest_power_off_keeps_the_disk_and_clears_max_run_duration(compute_server, clients):
    create(clients, "off", "shutdown -h now", max_run_s=60)
    wait_status(clients[0], "off", "TERMINATED")
    compute_server.config.time_scale = 6000  # 60 simulated seconds pass in 10 ms
    time.sleep(0.3)
    inst = compute_server.instance(ZONE, "off")
    assert inst.status == "TERMINATED" and not inst.deleted  # not deleted: its disk bills
    assert inst.going_down_because == "guest"


def test_a_request_outside_the_discovery_schema_is_a_400_and_recorded(compute_server):
    body = json.dumps(
        {"name": "x", "machineType": "zones/a/machineTypes/g2-standard-4", "notAField": 1}
    ).encode()
    request = urllib.request.Request(
        f"{compute_server.endpoint}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 400
    assert compute_server.schema_violations == [
        "request instances.insert: $: unknown field 'notAField'"
    ]
    compute_server.schema_violations.clear()  # expected here; stop() fails a test on any


def test_images_from_family_skip_deprecated_ones(compute_server):
    images = compute_v1.ImagesClient(**compute_client_options(compute_server))
    project, family = "deeplearning-platform-release", "common-cu128-ubuntu-2204-nvidia-570"
    found = images.get_from_family(project=project, family=family)
    assert found.name == f"{family}-v20261101" and not found.deprecated.state
    compute_server.catalog.deprecate_family(project, family, "fam-b")
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project=project, family=family)
    (old,) = images.list(
        request=compute_v1.ListImagesRequest(project=project, filter=f'family = "{family}"')
    )
    assert old.deprecated.state == "DEPRECATED" and old.deprecated.replacement.endswith("/fam-b")
    # A family that does not exist is no family at all (it resolved once: the stand-in was
    # kinder than Google).
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project=project, family="fam-a")


def test_gpu_quotas_in_regions_and_the_project(compute_server):
    kwargs = compute_client_options(compute_server)
    regions, projects = compute_v1.RegionsClient(**kwargs), compute_v1.ProjectsClient(**kwargs)

    def limits() -> tuple[dict[str, float], dict[str, float]]:
        region = regions.get(project=PROJECT, region="us-central1")
        project = projects.get(project=PROJECT)
        return {q.metric: q.limit for q in region.quotas}, {
            q.metric: q.limit for q in project.quotas
        }

    # A new project: no GPU anywhere (https://cloud.google.com/compute/resource-usage#gpu_quota).
    regional, overall = limits()
    assert regional["NVIDIA_L4_GPUS"] == regional["PREEMPTIBLE_NVIDIA_L4_GPUS"] == 0
    assert overall["GPUS_ALL_REGIONS"] == 0
    compute_server.catalog.raise_gpu_quotas()
    compute_server.catalog.set_region_quota("us-central1", "PREEMPTIBLE_NVIDIA_L4_GPUS", 0.0)
    regional, overall = limits()
    assert regional["NVIDIA_L4_GPUS"] == 8 and regional["PREEMPTIBLE_NVIDIA_L4_GPUS"] == 0
    assert overall["GPUS_ALL_REGIONS"] == 8


def test_a_vm_token_may_delete_only_when_its_identity_allows(compute_server, clients):
    create(clients, "bench-self")
    url = (
        f"{compute_server.endpoint}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/bench-self"
    )
    token = {"Authorization": "Bearer fake-token-bench-self"}
    with pytest.raises(urllib.error.HTTPError) as caught:  # default account, storage scope
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=token))
    assert caught.value.code == 403
    inst = compute_server.instance(ZONE, "bench-self")
    inst.sent["serviceAccounts"] = [
        {
            "email": "bench-vm@p.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/compute"],
        }
    ]
    compute_server.iam.grant_self_delete(PROJECT, "bench-vm@p.iam.gserviceaccount.com")
    create(clients, "other-vm")
    other = url.replace("instances/bench-self", "instances/other-vm")
    # Not a bench VM (the condition), and not a delete (the role): both refused.
    for refused, method in ((other, "DELETE"), (url + "/stop", "POST")):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(refused, method=method, headers=token))
        assert caught.value.code == 403
    assert compute_server.instance(ZONE, "other-vm") is not None
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=token)):
        pass
    compute_server.wait_for_status(ZONE, "bench-self", "DELETED")


def test_a_tick_waiting_on_the_lock_when_the_stand_in_stops_boots_nothing(compute_server, clients):
    """A VM the clock boots after shutdown looked for VMs to kill outlives the test (seen:
    a startup script alive 30 minutes after the suite, its test long passed). Shutdown sets
    the stop, then looks under the lock; a tick that was already waiting for the lock must
    not boot anything once it gets it."""
    instances, _ = clients
    compute_server.config.staging_s = 3600  # held in STAGING until the test lets it boot
    # Not waited for: the insert's operation ends at RUNNING.
    instances.insert(project=PROJECT, zone=ZONE, instance_resource=make_instance("late"))
    wait_instance(instances, "late", lambda seen: seen == "STAGING", "staging")
    compute = compute_server.compute
    with compute.lock:
        compute_server.config.staging_s = 0.0  # the next tick would boot it
        time.sleep(0.1)  # the clock's next tick is now waiting for the lock
        compute._stop.set()  # what shutdown does first
    time.sleep(0.2)
    with compute.lock:
        inst = compute.instances[(PROJECT, ZONE, "late")]
        assert (inst.status, inst.sandbox) == ("STAGING", None)
