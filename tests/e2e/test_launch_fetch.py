"""`launch --wait --fetch` (what `make demo` runs) fetches the run it launched, not the latest
in a state every clone of the user shares (issue 31)."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from tests.e2e.test_local_run import small_plan

pytestmark = pytest.mark.timeout(600)


def test_launch_wait_fetch_fetches_its_own_run(bench_env, tmp_path, capsys):
    plan = str(small_plan(tmp_path, samples=4))
    launch = ["launch", "--backend", "local", "--plan", plan, "--budget", "1"]
    registry = RunRegistry(bench_env / "state" / "runs.sqlite")
    assert main([*launch, "--wait"]) == 0  # an earlier run, left unfetched
    (first,) = registry.all()
    assert main([*launch, "--wait", "--fetch", "--dest", str(tmp_path / "got")]) == 0
    out = capsys.readouterr().out
    (second,) = [r for r in registry.all() if r.run_id != first.run_id]
    assert [p.name for p in (tmp_path / "got").iterdir()] == [second.run_id]
    assert second.run_id in out
    # status --json carries each ended run's noise decision (its A/A control's).
    assert main(["status", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert {run["noise"] for run in listed} <= {"quiet", "noisy"} and len(listed) == 2


def test_fetch_without_wait_is_refused(bench_env, capsys):
    assert main(["launch", "--backend", "local", "--budget", "1", "--fetch"]) == 2
    assert "--fetch fetches the one run --wait followed" in capsys.readouterr().err
