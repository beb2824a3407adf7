"""ComputeApi and GceBackend with the real google-cloud-compute client against the stand-in."""

from __future__ import annotations

import socket
import threading
import uuid

import pytest

from orchestrator.backends.base import Machine, Placement
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.gce.builder import build_instance, managed_filter
from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.backends.gce.errors import (
    ComputeUnreachable,
    GlobalQuotaExceeded,
    RegionalQuotaExceeded,
    ZoneUnavailable,
)
from orchestrator.config import BenchConfig
from orchestrator.errors import CloudError, NoCapacityError, QuotaError
from tests.fakes.compute_server import FakeComputeServer
from tests.unit.test_gce_builder import make_spec

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


@pytest.fixture
def server():
    # us-east4-a offers the L4 too (https://cloud.google.com/compute/docs/gpus/gpu-regions-zones)
    with FakeComputeServer(run_scripts=False, zones=(*ZONES, "us-east4-a")) as fake:
        fake.catalog.raise_gpu_quotas()  # a new project has none
        yield fake


def config_for(server, **overrides) -> BenchConfig:
    fields = {
        "project": "bench-test-project",
        "bucket": "bench-bucket",
        "zones": ZONES,
        "compute_endpoint": server.endpoint,
    }
    fields.update(overrides)
    return BenchConfig(**fields)


@pytest.fixture
def api(server):
    return ComputeApi(config_for(server), read_retry_seconds=5)


def instance_for(server, zone="us-central1-a", run_id="20261101-120000-abcdef", spot=True):
    return build_instance(
        make_spec(run_id=run_id),
        config_for(server),
        zone,
        "#!/bin/bash\necho hi\n",
        "#!/bin/bash\n",
        spot,
    )


def test_insert_get_delete(server, api):
    api.insert("us-central1-a", instance_for(server))
    sent = server.inserted[0]
    assert sent["scheduling"]["provisioningModel"] == "SPOT"
    assert sent["scheduling"]["maxRunDuration"]["seconds"] == "11880"
    assert sent["labels"]["bench-managed"] == "true"
    server.wait_for_status("us-central1-a", "bench-20261101-120000-abcdef", "RUNNING")
    got = api.get("us-central1-a", "bench-20261101-120000-abcdef")
    assert got.status == "RUNNING" and got.labels["bench-run"] == "20261101-120000-abcdef"
    assert api.delete("us-central1-a", "bench-20261101-120000-abcdef") is True
    assert api.get("us-central1-a", "bench-20261101-120000-abcdef") is None
    assert api.delete("us-central1-a", "bench-20261101-120000-abcdef") is False


@pytest.mark.parametrize("via", ["operation", "http"])
@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"]
)
def test_stockout_is_zone_unavailable(server, api, code, via):
    server.faults.stockout("us-central1-a", code=code, via=via)
    with pytest.raises(ZoneUnavailable) as caught:
        api.insert("us-central1-a", instance_for(server))
    assert caught.value.zone == "us-central1-a"
    assert caught.value.reason == "no capacity" and caught.value.detail == code


def test_missing_machine_type_is_zone_unavailable(server, api):
    server.faults.missing_machine_type("us-central1-a")
    with pytest.raises(ZoneUnavailable, match="not offered"):
        api.insert("us-central1-a", instance_for(server))


@pytest.mark.parametrize("via", ["http", "operation"])
def test_quotas_are_typed(server, api, via):
    server.faults.quota_exceeded("NVIDIA_L4_GPUS", region="us-central1", via=via)
    with pytest.raises(RegionalQuotaExceeded) as caught:
        api.insert("us-central1-a", instance_for(server))
    assert (caught.value.quota, caught.value.region) == ("NVIDIA_L4_GPUS", "us-central1")
    server.faults.clear()
    server.faults.quota_exceeded("GPUS_ALL_REGIONS", region=None, via=via)
    with pytest.raises(GlobalQuotaExceeded, match="GPUS_ALL_REGIONS"):
        api.insert("us-central1-a", instance_for(server))


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503])
def test_reads_retry_transient_errors(server, api, status):
    api.insert("us-central1-a", instance_for(server))
    server.faults.fail_next("instances.get", status=status, times=2)
    assert api.get("us-central1-a", "bench-20261101-120000-abcdef") is not None
    assert len(server.calls("instances.get")) == 3


def test_reads_survive_a_dropped_connection(server, api):
    api.insert("us-central1-a", instance_for(server))
    server.faults.drop_next("instances.get")
    assert api.get("us-central1-a", "bench-20261101-120000-abcdef") is not None
    assert len(server.calls("instances.get")) == 2


@pytest.mark.slow
def test_reads_that_keep_failing_end_as_a_cloud_error_with_the_last_status(server):
    api = ComputeApi(config_for(server), read_retry_seconds=0.5)
    server.faults.fail_next("instances.get", status=503, times=1000)
    with pytest.raises(CloudError, match="503") as failed:
        api.get("us-central1-a", "bench-x")
    assert failed.value.exit_code == 4


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_api_is_a_cloud_error_not_a_crash(server):
    # Nothing listens there: every call fails to connect. stop-all must report that, not
    # crash with "a bug".
    config = config_for(server, compute_endpoint=f"http://127.0.0.1:{closed_port()}")
    api = ComputeApi(config, read_retry_seconds=0.5)
    with pytest.raises(ComputeUnreachable, match="cannot reach Compute Engine") as failed:
        api.insert("us-central1-a", instance_for(server))
    assert failed.value.exit_code == 4 and "Connection refused" in str(failed.value)
    assert "stop-all" not in str(failed.value)  # never connected: no VM can exist
    with pytest.raises(ComputeUnreachable, match="cannot reach Compute Engine"):
        GceBackend(config, api=api).list_machines()
    with pytest.raises(ComputeUnreachable):
        api.delete("us-central1-a", "bench-x")


def test_an_insert_without_any_answer_says_where_the_vm_may_be(server, api, monkeypatch):
    # Every attempt went out and its connection died: GCE may have created the VM.
    monkeypatch.setattr("orchestrator.backends.gce.compute.time.sleep", lambda s: None)
    server.faults.drop_next("instances.insert", times=4)
    with pytest.raises(ComputeUnreachable, match="stop-all --dry-run") as failed:
        api.insert("us-central1-a", instance_for(server))
    assert "bench-20261101-120000-abcdef exists in us-central1-a" in str(failed.value)
    sent = server.calls("instances.insert")
    assert len(sent) == 4 and len({r.query["requestId"] for r in sent}) == 1


def test_a_lost_insert_answer_is_resent_with_its_request_id_and_makes_one_vm(
    server, api, monkeypatch
):
    monkeypatch.setattr("orchestrator.backends.gce.compute.time.sleep", lambda s: None)
    server.faults.lose_answer_next("instances.insert")
    api.insert("us-central1-a", instance_for(server))
    first, again = server.calls("instances.insert")
    assert first.query["requestId"] == again.query["requestId"]
    assert str(uuid.UUID(first.query["requestId"])) == first.query["requestId"]
    assert [i.name for i in server.instances()] == ["bench-20261101-120000-abcdef"]
    assert len(server.compute.operations) == 1  # the repeat got the first operation


@pytest.mark.slow
def test_an_insert_slower_than_one_wait_and_the_http_timeout_still_lands(monkeypatch):
    # The insert takes 90 s and each wait is held its full 2 minutes (both scaled 1/60);
    # the client's read timeout (scaled the same way) ends some waits early: still running.
    with FakeComputeServer(run_scripts=False, provisioning_s=1.5, operation_wait_s=2.0) as fake:
        fake.catalog.raise_gpu_quotas()
        api = ComputeApi(config_for(fake), read_retry_seconds=5, wait_http_timeout=0.5)
        api.insert("us-central1-a", instance_for(fake))
        waits = fake.calls("zoneOperations.wait")
        assert len(waits) >= 3  # at least two timed out before the operation was DONE
        assert fake.instance("us-central1-a", "bench-20261101-120000-abcdef").status in (
            "RUNNING",
            "STAGING",
        )


def test_no_client_timeout_is_shorter_than_the_documented_wait():
    from orchestrator.backends.gce import compute

    assert compute.OPERATION_WAIT_HTTP_TIMEOUT_SECONDS > compute.OPERATION_WAIT_SERVER_SECONDS
    assert compute.OPERATION_WAIT_SERVER_SECONDS == 120.0


@pytest.mark.slow
def test_aggregated_list_finds_labelled_instances_in_every_zone(server, api):
    for i, zone in enumerate(ZONES):
        api.insert(zone, instance_for(server, zone, run_id=f"20261101-12000{i}-abcdef"))
    unlabelled = instance_for(server, "us-central1-b", run_id="20261101-130000-abcdef")
    unlabelled.labels = {"team": "other"}
    api.insert("us-central1-b", unlabelled)
    found = api.list_instances(managed_filter())
    assert sorted((zone, inst.name) for zone, inst in found) == [
        (zone, f"bench-20261101-12000{i}-abcdef") for i, zone in enumerate(ZONES)
    ]


def test_serial_output_follows_next(tmp_path):
    with FakeComputeServer() as server:
        server.catalog.raise_gpu_quotas()
        api = ComputeApi(config_for(server), read_retry_seconds=5)
        api.insert("us-central1-a", instance_for(server))
        name = "bench-20261101-120000-abcdef"
        # Wait for the script's last line, so nothing new can arrive between the two reads.
        server.wait_for(
            lambda: "finished with exit status" in server.serial_output("us-central1-a", name)
        )
        first = api.serial_output("us-central1-a", name, 0)
        assert "startup-script: hi" in first.contents
        again = api.serial_output("us-central1-a", name, first.next_)
        assert again.start == first.next_ and again.contents == ""
        api.delete("us-central1-a", name)
        assert api.serial_output("us-central1-a", name, 0) is None


# -- GceBackend ----------------------------------------------------------------------------


@pytest.mark.slow
def test_backend_fails_over_to_the_third_zone(server):
    server.faults.stockout("us-central1-a")
    server.faults.missing_machine_type("us-central1-b")
    backend = GceBackend(config_for(server))
    placement = backend.start(make_spec(), "#!/bin/bash\n", "#!/bin/bash\n")
    assert (placement.location, placement.handle) == (
        "us-central1-c",
        "bench-20261101-120000-abcdef",
    )
    assert placement.spot is True
    assert [a.split(" ")[0] for a in placement.attempts] == ["us-central1-a", "us-central1-b"]
    assert [r.path.split("/")[6] for r in server.calls("instances.insert")] == ZONES


def test_backend_without_fallback_raises_no_capacity(server):
    for zone in ZONES:
        server.faults.stockout(zone)
    with pytest.raises(NoCapacityError, match="us-central1-c"):
        GceBackend(config_for(server)).start(make_spec(), "#!/bin/bash\n", "#!/bin/bash\n")


def test_backend_quota_everywhere(server):
    server.faults.quota_exceeded("PREEMPTIBLE_NVIDIA_L4_GPUS", region="us-central1")
    with pytest.raises(QuotaError, match="PREEMPTIBLE_NVIDIA_L4_GPUS in us-central1"):
        GceBackend(config_for(server)).start(make_spec(), "#!/bin/bash\n", "#!/bin/bash\n")
    assert len(server.calls("instances.insert")) == 1


@pytest.mark.slow
def test_backend_state_list_stop_and_release(server):
    backend = GceBackend(config_for(server))
    placements = [
        backend.start(make_spec(run_id=f"20261101-12000{i}-abcdef"), "#!/bin/bash\n", "")
        for i in range(3)
    ]
    for p in placements:
        server.wait_for_status(p.location, p.handle, "RUNNING")
        assert backend.machine_state("x", p) == "RUNNING"
    machines = backend.list_machines()
    assert sorted(m.run_id for m in machines) == [f"20261101-12000{i}-abcdef" for i in range(3)]
    assert all(m.rate_usd_per_hour > 0 for m in machines)
    backend.release("20261101-120000-abcdef", placements[0])
    backend.release("20261101-120000-abcdef", placements[0])  # idempotent
    assert backend.machine_state("x", placements[0]) == "GONE"
    ghost = Machine("20261101-999999-abcdef", "bench-gone", "us-central1-a", "RUNNING")
    stopped = backend.stop(backend.list_machines() + [ghost])
    assert sorted(m.name for m in stopped) == sorted(p.handle for p in placements[1:]) + [
        "bench-gone"
    ]
    assert backend.list_machines() == [] and backend.stop_failures == {}


@pytest.mark.slow
def test_list_machines_prices_each_instance_by_what_it_is_and_whether_it_runs(server):
    # stop-all reports the hourly spend it stopped: each VM at its own region, model and
    # state, not at the current config's rate.
    api = ComputeApi(config_for(server), read_retry_seconds=5)
    launches = [
        ("us-central1-a", "20261101-120001-abcdef", True),
        ("us-central1-b", "20261101-120002-abcdef", False),
        ("us-east4-a", "20261101-120003-abcdef", True),  # a region the catalog does not price
        ("us-central1-c", "20261101-120004-abcdef", True),
    ]
    for zone, run_id, spot in launches:
        api.insert(zone, instance_for(server, zone, run_id=run_id, spot=spot))
    # Powered off (bench itself never stops a VM; a guest power-off looks the same): disk only.
    name = "bench-20261101-120004-abcdef"
    api.finish(
        "us-central1-c",
        api.instances.stop_unary(project=api.project, zone="us-central1-c", instance=name),
    )
    disk = 100 * 0.10 / 730
    rates = {m.run_id: m.rate_usd_per_hour for m in GceBackend(config_for(server)).list_machines()}
    # A running VM bills its external address too (spot $0.0025/h, standard $0.005/h).
    assert rates == pytest.approx(
        {
            "20261101-120001-abcdef": 0.05874 + 0.2231 + disk + 0.0025,
            "20261101-120002-abcdef": 0.14679 + 0.56004 + disk + 0.005,
            "20261101-120003-abcdef": 0.0,
            "20261101-120004-abcdef": disk,
        }
    )


@pytest.mark.slow
def test_backend_machine_state_after_guest_power_off(tmp_path):
    with FakeComputeServer() as server:
        server.catalog.raise_gpu_quotas()
        backend = GceBackend(config_for(server), poll_seconds=0.05)
        spec = make_spec()
        # GCE serves serial output only while the VM runs: the script closes its output (so
        # that the unterminated last line reaches the serial port) and stays up until the
        # follower has read past it (a fixed sleep raced a loaded machine), at most a minute.
        seen = tmp_path / "seen"
        script = (
            "#!/bin/bash\necho line one\nprintf 'no newline'\nexec >/dev/null 2>&1\n"
            f"for _ in $(seq 1200); do [ -e {seen} ] && break; sleep 0.05; done\n"
            "shutdown -h now\n"
        )
        placement = backend.start(spec, script, "")
        zone, name = placement.location, placement.handle

        def release_when_read():
            server.wait_for(lambda: "no newline" in server.serial_output(zone, name))
            end = len(server.serial_output(zone, name).encode())
            server.wait_for(
                lambda: any(
                    int(r.query.get("start", 0)) >= end
                    for r in server.calls("instances.getSerialPortOutput")
                )
            )
            seen.touch()

        releaser = threading.Thread(target=release_when_read, daemon=True)
        releaser.start()
        lines = list(backend.log_lines(spec.run_id, placement, follow=True))
        releaser.join()
        assert backend.machine_state(spec.run_id, placement) == "TERMINATED"
        assert any(line.endswith("startup-script: line one") for line in lines)
        assert any("no newline" in line for line in lines)
        assert backend.list_machines()[0].state == "TERMINATED"
        backend.release(spec.run_id, Placement(location="", handle=""))
        assert backend.machine_state(spec.run_id, placement) == "GONE"


class ScriptedSerialApi:
    """serial_output/get answers in order: None while booting, chunks, then TERMINATED."""

    def __init__(self, chunks, states):
        self.chunks, self.states = list(chunks), list(states)

    def serial_output(self, zone, name, start):
        from google.cloud import compute_v1

        text = self.chunks.pop(0) if self.chunks else ""
        if text is None:
            return None
        return compute_v1.SerialPortOutput(contents=text, start=start, next_=start + len(text))

    def get(self, zone, name):
        from google.cloud import compute_v1

        return compute_v1.Instance(status=self.states.pop(0) if self.states else "TERMINATED")


def test_log_lines_waits_out_boot_and_drains_after_stop():
    config = BenchConfig(project="bench-test-project", bucket="b-bucket")
    api = ScriptedSerialApi(
        [None, "one\ntw", "o\r\n", "", "last line"], ["STAGING", "RUNNING", "TERMINATED"]
    )
    backend = GceBackend(config, api=api, poll_seconds=0)
    placement = Placement(location="us-central1-a", handle="bench-x")
    assert list(backend.log_lines("x", placement, follow=True)) == ["one", "two", "last line"]


def test_instance_request_json_is_the_wire_body(server):
    import json

    backend = GceBackend(config_for(server))
    spec, startup, shutdown = make_spec(), "#!/bin/bash\necho hi\n", "#!/bin/bash\n"
    body = json.loads(backend.instance_request_json(spec, startup, shutdown, zone="us-central1-b"))
    assert server.requests == []  # rendering sends nothing
    # What the client really sends for the same instance, less the scripts' text.
    backend.api.insert(
        "us-central1-b",
        build_instance(spec, backend.config, "us-central1-b", startup, shutdown, True),
    )
    (sent,) = server.inserted
    assert [item["value"] for item in body["metadata"]["items"]] == [
        "<20 bytes: the startup script `bench render` prints>",
        "<12 bytes: the script `bench render --shutdown` prints>",
    ]
    for item in sent["metadata"]["items"]:
        item.pop("value")
    for item in body["metadata"]["items"]:
        item.pop("value")
    assert body == sent
