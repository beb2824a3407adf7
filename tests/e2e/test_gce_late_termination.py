"""A run that reaches its cap and is terminated as late as Google allows still bills within
its budget (issue 32). Google: the automatic termination can start up to 30 s after the
time limit (https://cloud.google.com/compute/docs/instances/limit-vm-runtime, Restrictions);
a delete lets the guest shut down for up to 90 s
(https://cloud.google.com/compute/docs/shutdownscript). The compute stand-in plays both in
full (its clock simulated: no real 30 s wait) and counts what the instance bills by Google's
billing model (tests/fakes/compute_state.py, `billed_seconds`); bench's worst case
(pricing.worst_case_usd) must cover that bill."""

from __future__ import annotations

import pytest

from orchestrator.backends.gce import pricing
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from tests.e2e.test_gce_cli import plan_file
from tests.fakes.compute_state import MAX_RUN_LATENESS_LIMIT_S, FakeComputeConfig
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(120)

TIME_SCALE = 60.0  # simulated seconds per real second
SHUTDOWN_SIM_S = 90  # the longest a delete's guest shutdown bills, as Google documents
BUDGET_USD = 0.08  # the smallest budget that runs the test plan: the shortest cap


def test_the_stand_in_refuses_a_lateness_google_does_not_document():
    config = FakeComputeConfig()
    config.max_run_lateness_sim_s = MAX_RUN_LATENESS_LIMIT_S
    with pytest.raises(ValueError, match="Google says 0 to 30 s"):
        config.max_run_lateness_sim_s = MAX_RUN_LATENESS_LIMIT_S + 1


def test_a_run_terminated_30_s_late_after_its_cap_bills_within_the_budget(gce, tmp_path, capsys):
    gce.config.run_scripts = False  # the machine runs to its cap: the worst case
    gce.config.time_scale = TIME_SCALE
    gce.config.max_run_lateness_sim_s = MAX_RUN_LATENESS_LIMIT_S
    gce.config.stopping_s = SHUTDOWN_SIM_S / TIME_SCALE
    args = ["launch", "--backend", "gce", "--budget", str(BUDGET_USD), "--plan"]
    assert main([*args, plan_file(tmp_path)]) == 0, capsys.readouterr().err
    (sent,) = gce.inserted
    cap = int(sent["scheduling"]["maxRunDuration"]["seconds"])
    (instance,) = gce.instances()
    gce.wait_for(lambda: instance.deleted, timeout=HANG_SECONDS)

    assert instance.going_down_because == "maxRunDuration"
    assert instance.went_down_after_sim_s >= cap + MAX_RUN_LATENESS_LIMIT_S  # late, in full
    billed = gce.billed_seconds(instance)
    assert billed.machine >= cap + MAX_RUN_LATENESS_LIMIT_S + SHUTDOWN_SIM_S
    disk_gb = int(sent["disks"][0]["initializeParams"]["diskSizeGb"])
    rate = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=disk_gb)
    bill = {
        # at the most a spot price can become: the on-demand price
        "machine and GPUs": rate.machine_ceiling * billed.machine / 3600,
        "boot disk": rate.disk * billed.attached / 3600,
        "external address": rate.address * billed.attached / 3600,
    }
    worst = dict(pricing.worst_case_items(rate, cap))
    assert all(bill[item] <= worst[item] for item in bill), (bill, worst)
    assert sum(bill.values()) <= pricing.worst_case_usd(rate, cap) <= BUDGET_USD
