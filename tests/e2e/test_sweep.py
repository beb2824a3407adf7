"""`bench launch --gpu l4,t4,a100,h100`: one budget across GPU types, end to end with the
real CLI against the compute stand-in (insert bodies validated against the compute v1
discovery document) and, on the local backend, the real startup script and payload."""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.backends.gce import pricing
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from orchestrator.gpus import load_gpu_catalog, member_config
from orchestrator.registry import RunRegistry
from orchestrator.runtime_model import model_phases
from results_schema import Plan
from tests.e2e.test_gce_cli import plan_file
from tests.e2e.test_local_run import small_plan

pytestmark = pytest.mark.timeout(240)

FOUR = ["l4", "t4", "a100", "h100"]
SHAPES = {
    "g2-standard-4": "nvidia-l4",
    "n1-standard-4": "nvidia-tesla-t4",
    "a2-highgpu-1g": "nvidia-tesla-a100",
    "a3-highgpu-1g": "nvidia-h100-80gb",
}


def member_rates(gce) -> dict[str, pricing.HourlyRate]:
    """Machine type -> its rate at launch: the boot disk at its image's size (the stand-in's)."""
    rates = {}
    for machine in SHAPES:
        member = _member(machine)
        image = gce.catalog.image_from_family(member.image_project, member.image_family)
        rates[machine] = pricing.hourly_rate(member, spot=True, disk_gb=int(image["diskSizeGb"]))
    return rates


def expected_caps(gce, plan_path: str, total: float) -> dict[str, int]:
    """Machine type -> the time cap its share buys, from the catalogs, worked out here: the
    split by each run's worst case at the catalog's assumed disk (no image read yet), each
    cap at its rate once the image was read."""
    plan = Plan.model_validate_json(open(plan_path).read())
    cost = {}
    for machine in SHAPES:
        member = _member(machine)
        seconds = model_phases(plan, "gce", SHAPES[machine], member.image_family).total_seconds
        cost[machine] = pricing.worst_case_usd(pricing.hourly_rate(member, spot=True), seconds)
    needed, rates = sum(cost.values()), member_rates(gce)
    return {
        machine: pricing.max_run_seconds_for(int(total * c / needed * 1000) / 1000, rates[machine])
        for machine, c in cost.items()
    }


def registry() -> RunRegistry:
    from orchestrator.cli.options import make_context

    return make_context().registry


def sweep_id_of(out: str) -> str:
    return re.search(r"sweep (sweep-\d{8}-\d{6}-[0-9a-f]{6})", out).group(1)


def test_a_sweep_resolves_and_shapes_its_plan_once_for_every_member(
    gce, tmp_path, capsys, monkeypatch
):
    """Issue 51 item 2: one launch plan for the whole sweep (shaping reads a baseline's
    tree from git: once, not once per member)."""
    from orchestrator.service import plan_options, plans

    calls = {"resolved": 0, "shaped": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        plans, "resolve_plan_on_target", counted("resolved", plans.resolve_plan_on_target)
    )
    monkeypatch.setattr(plan_options, "with_peers", counted("shaped", plan_options.with_peers))
    gce.config.run_scripts = False
    args = ["launch", "--backend", "gce", "--gpu", "l4,t4", "--budget", "5.00"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 0
    assert "2 of 2 GPU types running" in capsys.readouterr().out
    assert calls == {"resolved": 1, "shaped": 1}


def test_four_gpu_sweep_inserts_four_vms_with_their_shapes_and_caps(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    plan = plan_file(tmp_path)
    args = ["launch", "--backend", "gce", "--gpu", ",".join(FOUR), "--budget", "5.00"]
    assert main([*args, "--plan", plan]) == 0
    out = capsys.readouterr().out
    bodies = {b["machineType"].rsplit("/", 1)[-1]: b for b in gce.inserted}
    assert sorted(bodies) == sorted(SHAPES)
    caps = expected_caps(gce, plan, 5.00)
    sweep_ids = set()
    for machine, body in bodies.items():
        (accelerator,) = body["guestAccelerators"]
        assert accelerator["acceleratorType"].rsplit("/", 1)[-1] == SHAPES[machine]
        assert accelerator["acceleratorCount"] == 1
        scheduling = body["scheduling"]
        assert scheduling["provisioningModel"] == "SPOT"
        assert scheduling["instanceTerminationAction"] == "DELETE"
        assert int(scheduling["maxRunDuration"]["seconds"]) == caps[machine]
        sweep_ids.add(body["labels"]["bench-sweep"])
    # One sweep; the four caps together cost no more than the budget.
    (sweep_id,) = sweep_ids
    assert sweep_id == sweep_id_of(out)
    rates = member_rates(gce)
    assert sum(pricing.worst_case_usd(rates[m], caps[m]) for m in SHAPES) <= 5.00
    assert len(set(caps.values())) == 4  # each VM its own cap
    assert "4 of 4 GPU types running" in out
    # The registry groups the members; status and stop-all take the sweep id.
    members = registry().sweep_members(sweep_id)
    assert sorted(r.gpu for r in members) == sorted(FOUR)
    assert sum(r.budget_usd for r in members) <= 5.00
    assert main(["status", sweep_id]) == 0
    status = capsys.readouterr().out
    assert all(f"gce:{key}" in status for key in FOUR)
    assert main(["stop-all", members[0].run_id, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "would stop 1 machines" in dry
    assert main(["stop-all", sweep_id, "--yes"]) == 0
    assert "stopped 4 machines" in capsys.readouterr().out


def _member(machine: str) -> BenchConfig:
    config = BenchConfig(zones=["us-central1-a", "us-central1-b", "us-central1-c"])
    gpu = next(g for g in load_gpu_catalog().values() if g.machine_type == machine)
    return member_config(config, gpu)


def test_a_gpu_type_sold_out_everywhere_leaves_the_other_three_running(gce, tmp_path, capsys):
    gce.config.run_scripts = False
    gce.faults.stockout_everywhere("a2-highgpu-1g")
    args = ["launch", "--backend", "gce", "--gpu", ",".join(FOUR), "--budget", "5"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 4
    out = capsys.readouterr().out
    assert "a100 did not start" in out and "no zone could place the VM" in out
    assert "3 of 4 GPU types running (l4, t4, h100)" in out
    running = sorted(i.sent["machineType"].rsplit("/", 1)[-1] for i in gce.instances())
    assert running == ["a3-highgpu-1g", "g2-standard-4", "n1-standard-4"]
    failed = [r for r in registry().all() if r.gpu == "a100"]
    assert [(r.state, r.cost_usd) for r in failed] == [("failed", 0.0)]


def test_a_budget_too_small_for_a_share_is_refused_before_anything_is_created(
    gce, tmp_path, capsys
):
    args = ["launch", "--backend", "gce", "--gpu", "t4,h100", "--budget", "0.05"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "t4's share" in err and "h100's share" in err and "Nothing was created" in err
    assert gce.inserted == [] and gce.instances() == []
    assert registry().all() == []


def test_h100_is_never_on_demand(gce, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_SPOT", "false")
    args = ["launch", "--backend", "gce", "--gpu", "h100", "--budget", "5"]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 2
    assert "offered only as Spot or Flex_Start" in capsys.readouterr().err
    assert gce.inserted == []


def test_local_sweep_runs_end_to_end_and_its_report_renders(
    bench_env, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "80")
    plan = small_plan(tmp_path)
    assert main(["launch", "--backend", "local", "--gpu", "local", "--budget", "1",
                 "--plan", str(plan), "--wait"]) == 0  # fmt: skip
    sweep_id = sweep_id_of(capsys.readouterr().out)
    assert main(["fetch", sweep_id]) == 0
    capsys.readouterr()
    assert main(["report", sweep_id]) == 0
    out = capsys.readouterr().out
    assert f"sweep {sweep_id}" in out and "local" in out
    print(out)
    # Every line fits 80 columns but the plot's path, which is never broken.
    assert max(len(line) for line in out.splitlines() if not line.startswith("plot:")) <= 80
    plot = bench_env / "work" / "results" / sweep_id / "report" / "gpus.png"
    assert plot.is_file() and plot.read_bytes()[:4] == b"\x89PNG"
    # The speedup shown is the candidate's over its first baseline, with the interval of
    # that geometric mean as the run computed it (its manifest's comparison), called that.
    shown = re.search(r"(\d+\.\d\d)x \[(\d+\.\d\d), (\d+\.\d\d)\]", out)
    results = bench_env / "work" / "results"
    (run_dir,) = [p for p in results.iterdir() if p.name not in (sweep_id, ".gitignore")]
    comparison = json.loads((run_dir / "manifest.json").read_text())["comparison"][0]
    got = tuple(float(x) for x in shown.groups())
    want = tuple(round(comparison[k], 2) for k in ("geomean", "ci_low", "ci_high"))
    assert got == want
    assert "geometric means of the configs' 95% bounds" not in out


def test_local_backend_takes_only_this_machines_gpu(bench_env, tmp_path, capsys):
    args = ["launch", "--backend", "local", "--budget", "1", "--plan", str(small_plan(tmp_path))]
    assert main([*args, "--gpu", "l4,t4"]) == 2
    assert "the local backend runs on this machine's GPU" in capsys.readouterr().err
    assert registry().all() == []
