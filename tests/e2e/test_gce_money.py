"""Issue 32, items 1 and 2, end to end: what a launch sends can never bill more than its
budget, and no launch leaves a disk billing unless the user said so.

The worst-case bill is worked out here, independently of orchestrator/budget.py, from the
insert body the compute stand-in received (machine type, GPUs, boot disk, provisioning
model, maxRunDuration, access configs) and the bundled price catalog, with Google's
documented billing rules:
- the automatic termination may start up to 30 s after the time limit
  (https://cloud.google.com/compute/docs/instances/limit-vm-runtime);
- a delete stops the VM first, which bills until TERMINATED, up to 90 s
  (https://cloud.google.com/compute/docs/shutdownscript);
- a 1-minute minimum, then per second
  (https://cloud.google.com/compute/vm-instance-pricing#billing_model): at most 60 s more;
- the disk and the address also exist while the insert and the delete run (bench waits at
  most OPERATION_TIMEOUT_SECONDS for each);
- spot prices of machine types and GPUs "can change up to once every day" with discounts "up
  to 91%" off the on-demand price and no floor (https://cloud.google.com/spot-vms/pricing,
  read 2026-11; https://docs.cloud.google.com/compute/docs/instances/create-use-spot, read
  2026-11-29): the change may come at any second of the cap, so a spot machine and its GPUs
  can bill up to the on-demand rate from the start.
"""

from __future__ import annotations

import pytest

from orchestrator.backends.gce.compute import OPERATION_TIMEOUT_SECONDS
from orchestrator.backends.gce.pricing import load_catalog
from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from tests.e2e.test_gce_cli import bucket_objects, plan_file
from tests.fakes import compute_catalog

pytestmark = pytest.mark.timeout(300)

IMAGE_PROJECT = "deeplearning-platform-release"
RUN_OVERRUN_SECONDS = 30 + 90 + 60
ATTACHED_OUTSIDE_RUN_SECONDS = 2 * OPERATION_TIMEOUT_SECONDS
# $0.08 to $100: the smallest that still boots the VM and runs the test plan at on-demand
# prices, up to past what the one-day ceiling costs.
BUDGETS = [0.08, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 7.77, 10.0, 25.0, 100.0]


def last(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def image_disk_gb(gce, source_image: str) -> int:
    """What GCE sizes a disk without diskSizeGb at: its image's size, as the stand-in says."""
    project, family = source_image.split("/")[1], last(source_image)
    return int(gce.catalog.image_from_family(project, family)["diskSizeGb"])


def worst_case_bill(
    gce, body: dict, spot_at_on_demand: bool = True, longer_cap: int = 0
) -> dict[str, float]:
    """The most the VM this insert body asks for can bill when it runs to its cap (made
    `longer_cap` seconds longer), item by item, at the bundled catalog's prices (a spot
    machine and GPUs at the on-demand rate unless `spot_at_on_demand` is False)."""
    catalog = load_catalog()
    zone = body["machineType"].split("/")[1]
    prices = catalog["regions"][zone.rsplit("-", 1)[0]]
    scheduling = body["scheduling"]
    kind = "spot" if scheduling["provisioningModel"] == "SPOT" else "on_demand"
    machine_kind = "on_demand" if spot_at_on_demand else kind
    machine = prices["machines"][last(body["machineType"])][machine_kind]
    gpus = sum(
        prices["gpus"][last(a["acceleratorType"])][machine_kind] * a["acceleratorCount"]
        for a in body.get("guestAccelerators", [])
    )
    (boot,) = [d for d in body["disks"] if d.get("boot")]
    params = boot["initializeParams"]
    disk_gb = int(params.get("diskSizeGb") or image_disk_gb(gce, params["sourceImage"]))
    disk = disk_gb * prices["disks"]["pd-balanced"]["gb_month"] / 730
    addresses = sum(len(nic.get("accessConfigs", [])) for nic in body["networkInterfaces"])
    address = addresses * catalog["external_ipv4"][kind]
    cap = int(scheduling["maxRunDuration"]["seconds"]) + longer_cap
    running = cap + RUN_OVERRUN_SECONDS
    attached = running + ATTACHED_OUTSIDE_RUN_SECONDS
    return {
        "machine and GPUs": (machine + gpus) * running / 3600,
        f"{disk_gb} GB boot disk": disk * attached / 3600,
        f"{addresses} external IPv4": address * attached / 3600,
    }


@pytest.fixture
def stand_in(gce, monkeypatch):
    """The gce fixture with GPU quota, VMs that run no script, and a Deep Learning VM image
    of 200 GB: larger than the size bench assumes before it reads the image."""
    gce.catalog.raise_gpu_quotas()
    gce.config.run_scripts = False
    monkeypatch.setitem(compute_catalog.IMAGE_SIZE_GB, IMAGE_PROJECT, 200)
    return gce


@pytest.mark.parametrize("budget_usd", BUDGETS)
def test_the_worst_case_bill_of_the_sent_request_is_within_the_budget(
    stand_in, tmp_path, capsys, budget_usd
):
    args = ["launch", "--backend", "gce", "--budget", str(budget_usd), "--allow-leftover-disk"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 0, capsys.readouterr().err
    (body,) = stand_in.inserted
    bill = worst_case_bill(stand_in, body)
    assert "200 GB boot disk" in bill and "1 external IPv4" in bill
    # The spot machine priced at the on-demand rate from the first second still fits.
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert sum(bill.values()) <= budget_usd, bill
    # Nor is the budget thrown away: a cap one minute longer would pass it (below the
    # one-day ceiling).
    if int(body["scheduling"]["maxRunDuration"]["seconds"]) < 24 * 3600:
        longer = worst_case_bill(stand_in, body, longer_cap=60)
        assert sum(longer.values()) > budget_usd


def test_a_budget_that_cannot_boot_the_vm_is_exit_2_and_sends_nothing(stand_in, tmp_path, capsys):
    args = ["launch", "--backend", "gce", "--budget", "0.02", "--allow-leftover-disk"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "$0.02 is too small" in line and "raise --budget" in line
    assert stand_in.requests == []


def test_the_default_account_is_refused_naming_bench_setup_and_nothing_is_created(
    stand_in, gcs_server, gcs_bucket, bench_env, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("BENCH_ALLOW_LEFTOVER_DISK", raising=False)
    monkeypatch.delenv("BENCH_SERVICE_ACCOUNT", raising=False)
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main(args) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "default service account" in line and "`bench setup --apply`" in line
    assert "--allow-leftover-disk" in line and "Nothing was created" in line
    assert "launched run" not in captured.out
    assert stand_in.calls("instances.insert") == []
    assert bucket_objects(gcs_server, gcs_bucket) == []
    assert RunRegistry(bench_env / "state" / "runs.sqlite").all() == []


def test_accepting_the_leftover_disk_prints_what_it_bills_per_hour(stand_in, tmp_path, capsys):
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main([*args, "--allow-leftover-disk"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    per_hour = 200 * load_catalog()["regions"]["us-central1"]["disks"]["pd-balanced"]["gb_month"]
    assert f"200 GB boot disk bills ${per_hour / 730:.4f}/h until `bench fetch " in out
    (body,) = stand_in.inserted
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "200"


def test_a_sweep_on_the_default_account_is_refused_once_and_sends_no_insert(
    stand_in, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("BENCH_ALLOW_LEFTOVER_DISK", raising=False)
    args = ["launch", "--backend", "gce", "--gpu", "l4,t4", "--budget", "5"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "`bench setup --apply`" in line and captured.out == ""
    assert stand_in.calls("instances.insert") == []


def test_a_self_deleting_vm_shows_the_bound_on_a_failed_self_delete(
    stand_in, tmp_path, capsys, monkeypatch
):
    """Issue 50 item 5: should its self-delete fail, the VM runs on until GCE deletes it,
    disk included, at its cap (a power-off would clear the cap and leave the disk billing):
    launch says so, with the most that can then bill."""
    monkeypatch.delenv("BENCH_ALLOW_LEFTOVER_DISK", raising=False)
    monkeypatch.setenv(
        "BENCH_SERVICE_ACCOUNT", "bench-vm@bench-test-project.iam.gserviceaccount.com"
    )
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main(args) == 0, capsys.readouterr().err
    out = " ".join(capsys.readouterr().out.split())
    (body,) = stand_in.inserted
    cap = int(body["scheduling"]["maxRunDuration"]["seconds"])
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    bill = sum(worst_case_bill(stand_in, body).values())
    assert (
        "should this VM fail to delete itself, it runs on until GCE deletes it, boot disk "
        f"included, at its {cap // 3600}h{cap % 3600 // 60:02d}m cap: nothing bills past "
        f"${bill:.2f}" in out
    ), out
