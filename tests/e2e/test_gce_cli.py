"""`bench` on the gce backend, end to end: the real CLI and the real google-cloud clients
against the loopback Compute stand-in and the real fake-gcs-server, whose "VM" runs the
rendered startup script."""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from orchestrator import budget
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from results_schema import Manifest, Plan

pytestmark = pytest.mark.timeout(180)
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


@pytest.fixture
def gce(bench_env, compute_server, gcs_server, gcs_bucket, monkeypatch):
    """bench pointed at both stand-ins; the fake VM's python3 is this test's python."""
    settings = {
        "PROJECT": "bench-test-project",
        "BUCKET": gcs_bucket,
        "ZONES": ",".join(ZONES),
        "COMPUTE_ENDPOINT": compute_server.endpoint,
        "STORAGE_ENDPOINT": gcs_server.endpoint,
        "METADATA_ENDPOINT": compute_server.metadata_url,
        "VM_WORK_DIR": str(bench_env / "vm"),
        "POLL_SECONDS": "0.2",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    compute_server.config.vm_path = [str(Path(sys.executable).parent)]
    return compute_server


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


def launched_run_id(capsys) -> str:
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "launched run" in line)
    return line.split("launched run ")[1].split()[0]


def test_launch_wait_fetch_and_nothing_is_left(gce, gcs_server, gcs_bucket, tmp_path, capsys):
    args = [
        "launch",
        "--backend",
        "gce",
        "--budget",
        "1.00",
        "--plan",
        plan_file(tmp_path),
        "--wait",
    ]
    assert main(args) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    assert main(["fetch", run_id, "--dest", str(tmp_path / "results")]) == 0
    assert "every sha256 verified" in capsys.readouterr().out
    manifest = Manifest.model_validate_json(
        (tmp_path / "results" / run_id / "manifest.json").read_text()
    )
    assert manifest.status == "complete"
    assert manifest.environment.zone == "us-central1-a"
    assert manifest.cost.rate_usd_per_hour == pytest.approx(
        budget.hourly_rate(BenchConfig(), True).total
    )
    assert gce.instances() == [], "fetch must delete the finished instance"
    assert f"bench/runs/{run_id}/logs/startup.log" in bucket_objects(gcs_server, gcs_bucket)


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
    rate = budget.hourly_rate(BenchConfig(), spot=True).total
    bought = 1.00 / rate * 3600
    cap = int(scheduling["maxRunDuration"]["seconds"])
    assert bought - budget.BILLING_MARGIN_SECONDS - 1 <= cap <= bought
    labels = sent["labels"]
    assert labels["bench-managed"] == "true" and labels["bench-run"] and labels["bench-owner"]
    (account,) = sent["serviceAccounts"]
    assert account["scopes"] == ["https://www.googleapis.com/auth/devstorage.read_write"]
    metadata = json.dumps(sent["metadata"]).lower()
    for marker in ("private_key", "client_secret", "ya29.", "refresh_token"):
        assert marker not in metadata
    # The script fetches its token at run time; no literal token travels in metadata.
    assert not re.search(r"bearer [a-z0-9._-]{16,}", metadata)


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
    status_name = f"bench/runs/{run_id}/status.json"

    def measuring():
        status = bucket_json(gcs_server, gcs_bucket, status_name)
        return status and status["phase"] == "benchmark" and status["done"] > 0

    gce.wait_for(measuring, timeout=90, interval=0.3)
    (instance,) = gce.instances()
    gce.preempt(instance.zone, instance.name)
    manifest_name = f"bench/runs/{run_id}/manifest.json"
    gce.wait_for(lambda: bucket_json(gcs_server, gcs_bucket, manifest_name), timeout=30)
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


def test_failing_build_uploads_log_and_failed_manifest_and_powers_off(
    gce, gcs_server, gcs_bucket, tmp_path, capsys
):
    # Our kernel on a machine with no GPU: the build phase must fail, loudly and cheaply.
    plan = plan_file(tmp_path, candidate="flash")
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan, "--wait"]) == 5
    err = capsys.readouterr().err
    assert "failed" in err and "build" in err
    (instance,) = gce.instances()
    instance = gce.wait_for_status(instance.zone, instance.name, "TERMINATED")
    assert instance.going_down_because == "guest"
    run_id = instance.sent["labels"]["bench-run"]
    manifest = Manifest.model_validate(
        bucket_json(gcs_server, gcs_bucket, f"bench/runs/{run_id}/manifest.json")
    )
    assert manifest.status == "failed" and manifest.failed_phase == "build"
    assert f"bench/runs/{run_id}/logs/startup.log" in bucket_objects(gcs_server, gcs_bucket)
    capsys.readouterr()
    assert main(["status", run_id]) == 0
    assert "disk still bills" in capsys.readouterr().out
    assert main(["fetch", run_id, "--dest", str(tmp_path / "r")]) == 5
    assert gce.instances() == [], "fetch deletes the powered-off instance and its disk"


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
    started = time.monotonic()
    gce.wait_for(lambda: gce.instances() == [], timeout=20)
    assert gce.instance(instance.zone, instance.name).going_down_because == "maxRunDuration"
    assert time.monotonic() - started < 20


def test_refusals_send_nothing(gce, gcs_server, gcs_bucket, tmp_path, monkeypatch, capsys):
    plan = plan_file(tmp_path)
    connects = []

    def no_connection(sock, address):
        connects.append(address)
        raise ConnectionRefusedError(f"a refused launch must not connect to {address}")

    with monkeypatch.context() as guard:
        # Not one connection, to Compute, Storage, metadata or an auth server: nothing sent.
        guard.setattr(socket.socket, "connect", no_connection)
        assert main(["launch", "--backend", "gce", "--budget", "0.01", "--plan", plan]) == 3
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


def test_a_lost_insert_is_exit_4_saying_where_the_vm_may_be(gce, tmp_path, capsys):
    gce.faults.drop_next("instances.insert")  # sent, then the connection died unanswered
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main(args) == 4
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot reach Compute Engine" in line and "bench stop-all --dry-run" in line
    assert len(gce.calls("instances.insert")) == 1  # never retried: no second VM


def test_stop_all_finds_and_deletes_only_bench_instances(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    plan = plan_file(tmp_path)
    for _ in range(2):
        assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    capsys.readouterr()
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


def test_render_prints_script_and_instance_request_and_creates_nothing(
    gce, gcs_server, gcs_bucket, bench_env, capsys
):
    assert main(["render", "--backend", "gce", "--plan", "default"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/usr/bin/env bash\n") and "phase_benchmark()" in captured.out
    request = json.loads(captured.err.split("# ---- instance request (JSON) ----", 1)[1])
    assert request["scheduling"]["instanceTerminationAction"] == "DELETE"
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
    on_demand = budget.hourly_rate(BenchConfig(), spot=False).total
    expected = budget.max_run_seconds_for(1.0, on_demand)
    assert int(landed["scheduling"]["maxRunDuration"]["seconds"]) == expected


def test_on_demand_fallback_is_refused_when_the_budget_covers_only_spot(gce, tmp_path, capsys):
    for zone in ZONES:
        gce.faults.stockout(zone, spot_only=True)
    args = ["launch", "--backend", "gce", "--budget", "0.10", "--plan", plan_file(tmp_path)]
    assert main([*args, "--on-demand-fallback"]) == 3
    assert "buys" in capsys.readouterr().err
    assert all(t["scheduling"]["provisioningModel"] == "SPOT" for t in gce.inserted)
    assert gce.instances() == []
