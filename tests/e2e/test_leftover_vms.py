"""A bench VM that stopped instead of being deleted (its watchdog powered it off, a host
event stopped it, the default account's VM at its end) has no time cap left: Compute Engine
clears max_run_duration on a stopped VM, and its disk bills until deleted. The user's next
launch deletes their own such VMs and says so; another user's are left alone (status lists
them with their delete command)."""

from __future__ import annotations

import pytest

from orchestrator.backends.gce.builder import build_instance
from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.cli import main
from results_schema.names import new_run_id
from tests.e2e.test_gce_cli import plan_file
from tests.unit.test_gce_builder import make_spec
from tests.unit.test_gce_compute import config_for

pytestmark = pytest.mark.timeout(120)


def _powered_off_vm(gce, owner: str, zone: str = "us-central1-a") -> str:
    """A bench VM of `owner` whose script powered it off: TERMINATED, its disk kept."""
    spec = make_spec(run_id=new_run_id(), owner=owner)
    config = config_for(gce)
    script = "#!/bin/bash\nshutdown -h now\n"
    ComputeApi(config).insert(zone, build_instance(spec, config, zone, script, script, True))
    gce.wait_for_status(zone, spec.instance_name, "TERMINATED")
    return spec.instance_name


def test_the_next_launch_deletes_the_users_own_powered_off_vms_and_says_so(
    gce, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("BENCH_OWNER", "ada")
    mine, theirs = _powered_off_vm(gce, "ada"), _powered_off_vm(gce, "grace")
    plan = plan_file(tmp_path)
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert f"deleted {mine} in us-central1-a, a powered-off bench VM of yours" in out
    assert "with no time cap left" in out and theirs not in out
    names = {instance.name for instance in gce.instances()}
    assert mine not in names and theirs in names
    (deleted,) = [r for r in gce.calls("instances.delete") if r.path.endswith(f"/{mine}")]
    assert deleted.caller == "controller"
    # The other user's is still listed, with the command that deletes it.
    assert main(["status"]) == 0
    assert f"leftover: {theirs} in us-central1-a is powered off" in capsys.readouterr().out
