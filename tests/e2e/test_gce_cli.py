"""`bench` on the gce backend, end to end: the real CLI and the real google-cloud clients
against the loopback Compute stand-in and the real fake-gcs-server, whose "VM" runs the
rendered startup script."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest

from orchestrator.backends.gce import pricing
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from results_schema import Manifest, Plan
from tests.e2e.conftest import ZONES
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(180)


def bucket_objects(gcs_server, bucket: str) -> list[str]:
    return sorted(blob.name for blob in gcs_server.client().bucket(bucket).list_blobs())


def bucket_json(gcs_server, bucket: str, name: str):
    blob = gcs_server.client().bucket(bucket).blob(name)
    return json.loads(blob.download_as_bytes()) if blob.exists() else None


def plan_file(
    tmp_path: Path, samples: int = 5, candidate: str = "sdpa", heavy: bool = False
) -> str:
    from orchestrator.service.plans import plans_dir

    plan = Plan.model_validate_json((plans_dir() / "cpu-smoke.json").read_text())
    configs = plan.configs[-2:] if heavy else plan.configs[:2]
    plan = plan.model_copy(
        update={
            "name": "gce-e2e",
            "samples_per_config": samples,
            "configs": configs,
            "candidate": candidate,
            "control": candidate,
        }
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    return str(path)


def image_gb(gce) -> int:
    """The boot disk's size launch reads from the image and asks for (the stand-in's)."""
    config = BenchConfig()
    image = gce.catalog.image_from_family(config.image_project, config.image_family)
    return int(image["diskSizeGb"])


def launched_run_id(capsys) -> str:
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "launched run" in line)
    return line.split("launched run ")[1].split()[0]


def run_key_of(run_id: str) -> str:
    """The run's store key, secret included, as the registry of this test's state dir has it."""
    from orchestrator.registry import RunRegistry

    registry = RunRegistry(Path(os.environ["BENCH_STATE_DIR"]) / "runs.sqlite")
    return registry.get(run_id).run_key


# The launch, wait and fetch of a whole run, and nothing left after it, is one test with
# the protocol-only backends (tests/e2e/test_backend_protocol.py): one run for both.


def discovery_valid(body) -> bool:
    from tests.fakes import discovery

    discovery.validate("compute", "v1", "Instance", body)
    return True


def test_insert_request_caps_the_money_and_carries_no_secret(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    assert (
        main(["launch", "--backend", "gce", "--budget", "1.00", "--plan", plan_file(tmp_path)]) == 0
    )
    (sent,) = gce.inserted
    scheduling = sent["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert scheduling["automaticRestart"] is False
    # The cap whose worst case fits $1.00 (tests/e2e/test_gce_money.py works it out from
    # the request), with the boot disk at the size the request asks for: the image's.
    rate = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=image_gb(gce))
    assert int(scheduling["maxRunDuration"]["seconds"]) == pricing.max_run_seconds_for(1.00, rate)
    assert sent["disks"][0]["initializeParams"]["diskSizeGb"] == str(image_gb(gce))
    labels = sent["labels"]
    assert labels["bench-managed"] == "true" and labels["bench-run"] and labels["bench-owner"]
    (account,) = sent["serviceAccounts"]
    assert account["scopes"] == ["https://www.googleapis.com/auth/devstorage.read_only"]
    metadata = json.dumps(sent["metadata"]).lower()
    for marker in ("private_key", "client_secret", "ya29.", "refresh_token"):
        assert marker not in metadata
    # The script fetches its token at run time; no literal token travels in metadata.
    assert not re.search(r"bearer [a-z0-9._-]{16,}", metadata)
    # The estimate names where its prices came from, and when they were read.
    catalog_date = pricing.load_catalog()["catalog_date"]
    assert f"prices from bench's bundled price catalog, dated {catalog_date}" in (
        capsys.readouterr().out
    )


def test_stockout_in_two_zones_lands_in_the_third(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    gce.faults.stockout("us-central1-a")
    gce.faults.stockout("us-central1-b", code="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tried us-central1-a (spot): no capacity [ZONE_RESOURCE_POOL_EXHAUSTED]" in out
    assert "tried us-central1-b (spot): no capacity [ZONE_RESOURCE_POOL_EXHAUSTED_WITH" in out
    assert "in us-central1-c" in out
    assert [i.zone for i in gce.instances()] == ["us-central1-c"]


def test_quota_everywhere_is_exit_4_naming_the_quota(gce, tmp_path, capsys):
    gce.faults.quota_exceeded("NVIDIA_L4_GPUS", region="us-central1")
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert "NVIDIA_L4_GPUS" in err and len(err.strip().splitlines()) == 1
    assert gce.instances() == []


def test_preemption_mid_benchmark_leaves_partial_results(
    gce, gcs_server, gcs_bucket, tmp_path, capsys
):
    gce.config.preemption_grace_s = 30.0  # what spot VMs get before the hard power-off
    plan = plan_file(tmp_path, samples=3000, heavy=True)
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    run_id = launched_run_id(capsys)
    # The VM's own status file, which the benchmark rewrites as it measures (the bucket's
    # copy follows only every 20 s heartbeat).
    vm_status = tmp_path / "vm" / run_id / "status.json"

    def measuring():
        try:
            status = json.loads(vm_status.read_text())
        except (OSError, ValueError):  # not there yet, or caught mid-rewrite
            return False
        return status["phase"] == "benchmark" and status["done"] > 0

    gce.wait_for(measuring, interval=0.3)
    (instance,) = gce.instances()
    gce.preempt(instance.zone, instance.name)
    manifest_name = f"bench/{run_key_of(run_id)}/manifest.json"
    gce.wait_for(lambda: bucket_json(gcs_server, gcs_bucket, manifest_name))
    manifest = Manifest.model_validate(bucket_json(gcs_server, gcs_bucket, manifest_name))
    assert manifest.status == "partial" and "preempted" in manifest.reason
    assert (
        0
        < manifest.file("results/measurements.csv").rows
        < manifest.plan.samples_per_implementation() * 3
    )
    # DELETE on preemption, once the guest is off: at the latest the hard power-off at the end
    # of the grace period (a loaded 2-core CI machine took over 10 s to finish the EXIT trap).
    gce.wait_for(lambda: gce.instances() == [], timeout=gce.config.preemption_grace_s + 10)
    assert main(["status", run_id]) == 0
    assert "preempted" in capsys.readouterr().out


def test_a_failing_phase_uploads_log_and_failed_manifest_and_powers_off(
    gce, gcs_server, gcs_bucket, tmp_path, capsys
):
    # A VM whose sha256sum lies: the payload phase must fail, loudly and cheaply. (A plan
    # its target cannot run, such as our kernel on a CPU, no longer reaches a VM at all:
    # tests/unit/test_plan_checks.py.) Without --wait nobody deletes the powered-off VM:
    # status shows it until fetch does.
    liar = tmp_path / "vm-bin" / "sha256sum"
    liar.parent.mkdir()
    liar.write_text('#!/bin/sh\necho "$(printf 0%.0s $(seq 64))  $1"\n')
    liar.chmod(0o755)
    gce.config.vm_path = [str(liar.parent), *gce.config.vm_path]
    plan = plan_file(tmp_path)
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    run_id = launched_run_id(capsys)
    (instance,) = gce.instances()
    instance = gce.wait_for_status(instance.zone, instance.name, "TERMINATED")
    assert instance.going_down_because == "guest"
    assert instance.sandbox.halted.is_set() and not instance.deleted  # its disk stays
    manifest = Manifest.model_validate(
        bucket_json(gcs_server, gcs_bucket, f"bench/{run_key_of(run_id)}/manifest.json")
    )
    assert manifest.status == "failed" and manifest.failed_phase == "payload"
    assert f"bench/{run_key_of(run_id)}/logs/startup.log" in bucket_objects(gcs_server, gcs_bucket)
    capsys.readouterr()
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    disk = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=image_gb(gce)).disk
    assert (
        f"leftover: {instance.name} in {instance.zone} is powered off; its disk bills "
        f"${disk:.4f}/h until deleted: bench fetch {run_id}"
    ) in out.replace("\n", " ")
    assert main(["fetch", run_id, "--dest", str(tmp_path / "r")]) == 5
    assert gce.instances() == [], "fetch deletes the powered-off instance and its disk"
    capsys.readouterr()
    assert main(["status"]) == 0
    assert "leftover" not in capsys.readouterr().out


def test_a_run_whose_grant_the_bucket_refuses_fails_in_the_payload_phase_in_seconds(
    gce, gcs_server, iam_credentials, tmp_path, capsys, monkeypatch
):
    from tests.fakes.gcs_proxy import GcsIamProxy

    # The signer of the run's grants holds no role on the bucket: its signed URL is refused.
    with GcsIamProxy(
        gcs_server.endpoint, gce.identity_of_token, public_key_of=iam_credentials.public_key
    ) as proxy:
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        plan = plan_file(tmp_path)
        assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
        run_id = launched_run_id(capsys)
        (instance,) = gce.instances()
        gce.wait_for_status(instance.zone, instance.name, "RUNNING")
        gce.wait_for(
            lambda: f"run {run_id} finished: failed" in instance.serial_text(), HANG_SECONDS
        )
        assert "phase environment" not in instance.serial_text()  # no install first
        # Every refusal is of a signed request (its uploads too), the payload's URL among them.
        assert {how for how, _, _ in proxy.denied} == {"signed"}
        assert any(
            method == "GET" and path.endswith(f"/runs/{run_id}/payload.tar.gz")
            for _, method, path in proxy.denied
        )
        # No manifest can reach the bucket: the VM stays up a while so its console says why.
        assert main(["status", run_id]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "failed" in out and "phase payload failed" in out
        assert "refused (HTTP 403): gs://" in out and "refused the run's signed grant" in out
        assert "from the VM's serial output" in out


def test_launch_wait_ends_at_once_when_the_vm_cannot_reach_the_bucket(
    gce, gcs_server, iam_credentials, tmp_path, capsys, monkeypatch
):
    from tests.fakes.gcs_proxy import GcsIamProxy

    with GcsIamProxy(
        gcs_server.endpoint, gce.identity_of_token, public_key_of=iam_credentials.public_key
    ) as proxy:  # no member: the signer's grant is refused
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
        assert main([*args, "--wait"]) == 5
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "failed: phase payload failed" in line and "refused the run's signed grant" in line
        assert proxy.denied
        # The wait ended on the VM's serial output, not at the VM's own end after its 180 s
        # reason window: bench deleted a VM still up.
        assert "its VM was deleted" in line
        (gone,) = gce.compute.gone
        assert gone.going_down_because == "delete"
        assert gce.instances() == []


def test_max_run_duration_deletes_the_vm_when_the_controller_is_gone(gce, tmp_path, capsys):
    # --no-wait returns right after the insert: exactly a controller killed at that moment.
    gce.config.run_scripts = False
    gce.config.time_scale = 1200.0
    args = [
        "launch",
        "--backend",
        "gce",
        "--budget",
        "1",
        "--plan",
        plan_file(tmp_path),
        "--max-runtime",
        "20m",
    ]
    assert main(args) == 0
    (instance,) = gce.instances()
    gce.wait_for(lambda: gce.instances() == [], timeout=HANG_SECONDS)
    assert gce.instance(instance.zone, instance.name).going_down_because == "maxRunDuration"


def test_refusals_send_nothing(gce, gcs_server, gcs_bucket, tmp_path, monkeypatch, capsys):
    plan = plan_file(tmp_path)
    connects = []

    def no_connection(sock, address):
        connects.append(address)
        raise ConnectionRefusedError(f"a refused launch must not connect to {address}")

    with monkeypatch.context() as guard:
        # Not one connection, to Compute, Storage, metadata or an auth server: nothing sent.
        guard.setattr(socket.socket, "connect", no_connection)
        # Too small to boot the VM: a usage error (exit 2), before the image is read.
        assert main(["launch", "--backend", "gce", "--budget", "0.01", "--plan", plan]) == 2
        assert "$0.01" in capsys.readouterr().err
        for key, value in [
            ("ZONES", "us-central1-z"),
            ("MACHINE_TYPE", "g2-standard-5"),
            ("BUCKET", "Not_A..Bucket"),
        ]:
            with monkeypatch.context() as patch:
                patch.setenv(f"BENCH_{key}", value)
                assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 2
                assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert connects == []
    assert gce.requests == []
    assert bucket_objects(gcs_server, gcs_bucket) == []


def test_a_lost_insert_answer_is_resent_and_leaves_exactly_one_vm(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    gce.faults.lose_answer_next("instances.insert")  # GCE made the VM; the answer was lost
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main(args) == 0
    first, again = gce.calls("instances.insert")
    assert first.query["requestId"] == again.query["requestId"]
    assert len(gce.instances()) == 1


def launch_two_idle_vms(gce, tmp_path, capsys) -> None:
    gce.config.run_scripts = False
    plan = plan_file(tmp_path)
    for _ in range(2):
        assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    capsys.readouterr()


def test_stop_all_finds_and_deletes_only_bench_instances(gce, tmp_path, capsys):
    launch_two_idle_vms(gce, tmp_path, capsys)
    assert main(["stop-all", "--dry-run"]) == 0
    assert "would stop 2 machines" in capsys.readouterr().out
    assert len(gce.instances()) == 2
    assert main(["stop-all", "--yes"]) == 0
    assert "stopped 2 machines" in capsys.readouterr().out
    assert gce.instances() == []


@pytest.mark.parametrize("flags", [["--yes"], ["--dry-run"]])
def test_stop_all_that_cannot_search_gce_never_says_nothing_is_running(gce, capsys, flags):
    gce.faults.fail_next("instances.aggregatedList", status=403, times=100)
    assert main(["stop-all", *flags]) == 4
    captured = capsys.readouterr()
    assert "no bench machines are running" not in captured.out
    (line,) = captured.err.strip().splitlines()
    assert "could not search gce" in line and "may still be running" in line


def test_stop_all_names_the_vm_it_could_not_delete_and_exits_4(gce, tmp_path, capsys):
    launch_two_idle_vms(gce, tmp_path, capsys)
    gce.faults.fail_next("instances.delete", status=403)
    assert main(["stop-all", "--yes"]) == 4
    captured = capsys.readouterr()
    (left,) = gce.instances()
    assert f"could not delete {left.name} in {left.zone}" in captured.out
    assert "stopped 1 machines" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert left.name in line and "may still bill" in line


def test_stop_all_without_a_project_says_gce_was_not_searched(bench_env, capsys):
    assert main(["stop-all", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "GCE was not searched: no project configured" in out
    assert "(local searched)" in out


def test_render_prints_script_and_instance_request_and_creates_nothing(
    gce, gcs_server, gcs_bucket, bench_env, capsys
):
    assert main(["render", "--backend", "gce", "--plan", "default"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/usr/bin/env bash\n") and "phase_measure()" in captured.out
    estimate = captured.err.split("# ---- runtime estimate", 1)[1]
    assert all(phase in estimate for phase in ("boot", "environment", "build", "shutdown"))
    # --instance: the instance request alone on stdout, machine-readable; tables on stderr.
    # The flags beat the environment (BENCH_PROJECT is bench-test-project here).
    flags = ["--project", "flag-project-1", "--zones", "us-central1-c", "--instance"]
    assert main(["render", "--backend", "gce", "--plan", "default", *flags]) == 0
    captured = capsys.readouterr()
    request = json.loads(captured.out)
    assert request["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert "us-central1-c" in request["machineType"]
    assert "runtime estimate" in captured.err
    assert main(["render", "--backend", "gce", "--bucket", "flag-bucket-1"]) == 0
    assert "flag-bucket-1" in capsys.readouterr().out and gcs_bucket != "flag-bucket-1"
    assert gce.requests == [] and bucket_objects(gcs_server, gcs_bucket) == []
    assert not (bench_env / "state").exists()


def test_on_demand_fallback_replans_the_time_cap_at_the_higher_rate(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    for zone in ZONES:
        gce.faults.stockout(zone, spot_only=True)
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main([*args, "--on-demand-fallback"]) == 0
    assert "retrying on-demand" in capsys.readouterr().out
    *spot_tries, landed = gce.inserted
    assert [t["scheduling"]["provisioningModel"] for t in spot_tries] == ["SPOT"] * 3
    assert landed["scheduling"]["provisioningModel"] == "STANDARD"
    on_demand = pricing.hourly_rate(BenchConfig(), spot=False, disk_gb=image_gb(gce))
    expected = pricing.max_run_seconds_for(1.0, on_demand)
    assert int(landed["scheduling"]["maxRunDuration"]["seconds"]) == expected


def test_a_launch_estimates_and_specs_its_run_once_through_the_fallback(
    gce, tmp_path, capsys, monkeypatch
):
    """Issue 51 item 2: the boot disk's real size and the on-demand fallback re-price the
    run's one spec; neither re-estimates the plan (each estimate reads the registry's past
    phase times) nor draws another run."""
    from orchestrator.registry import RunRegistry

    reads = []
    past = RunRegistry.past_phase_seconds
    monkeypatch.setattr(
        RunRegistry, "past_phase_seconds", lambda self, *a: reads.append(a) or past(self, *a)
    )
    gce.config.run_scripts = False
    for zone in ZONES:
        gce.faults.stockout(zone, spot_only=True)
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main([*args, "--on-demand-fallback"]) == 0
    assert "retrying on-demand" in capsys.readouterr().out
    assert len(reads) == 1
    assert len({body["labels"]["bench-run"] for body in gce.inserted}) == 1


def test_on_demand_fallback_is_refused_when_the_budget_covers_only_spot(gce, tmp_path, capsys):
    # A spot worst case already prices the machine at on-demand (spot prices may change
    # daily with no floor on the discount): what stays apart is the address, $0.0025/h on
    # spot and $0.005/h standard, so a budget at spot's edge still refuses the fallback.
    for zone in ZONES:
        gce.faults.stockout(zone, spot_only=True)
    args = ["launch", "--backend", "gce", "--budget", "0.0713", "--plan", plan_file(tmp_path)]
    assert main([*args, "--on-demand-fallback"]) in (2, 3)
    assert "budget $0.07" in capsys.readouterr().err
    assert gce.instances() == []


@pytest.mark.parametrize("broken", ["image", "quota"])
def test_launch_checks_image_and_quota_before_it_inserts(gce, tmp_path, capsys, broken):
    family = BenchConfig().image_family
    if broken == "image":
        gce.catalog.deprecate_family("deeplearning-platform-release", family, "newer-family")
    else:
        gce.catalog.set_region_quota("us-central1", "NVIDIA_L4_GPUS", 0.0)
        gce.catalog.set_region_quota("us-central1", "PREEMPTIBLE_NVIDIA_L4_GPUS", 0.0)
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main(args) == 4
    (line,) = capsys.readouterr().err.strip().splitlines()
    expected = "successor is newer-family" if broken == "image" else "PREEMPTIBLE_NVIDIA_L4_GPUS"
    assert expected in line and "No VM was created" in line and "bench doctor" in line
    assert gce.calls("instances.insert") == []


def test_status_still_shows_runs_when_powered_off_vms_cannot_be_listed(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]) == 0
    run_id = launched_run_id(capsys)
    gce.faults.fail_next("instances.aggregatedList", status=403, times=100)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert run_id in out and "could not list powered-off VMs that may still bill" in out
