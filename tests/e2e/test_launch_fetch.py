"""`launch --wait --fetch` (what `make demo` runs) fetches the run it launched, not the latest
in a state every clone of the user shares (issue 31)."""

from __future__ import annotations

import pytest

from orchestrator.cli import main

pytestmark = pytest.mark.timeout(600)


def test_launch_wait_fetch_fetches_its_own_run(two_local_runs):
    """An earlier run left unfetched, then `launch --wait --fetch`: the session's two runs
    (tests/e2e/conftest.py), which kept what that launch printed and fetched."""
    first, second = two_local_runs["run_ids"]
    assert two_local_runs["fetched_by_launch"] == [second]
    assert second in two_local_runs["launch_printed"]
    # status --json carries each ended run's noise decision (its A/A control's).
    listed = two_local_runs["status_json"]["runs"]
    assert {run["noise"] for run in listed} <= {"quiet", "noisy"} and len(listed) == 2
    assert {run["run_id"] for run in listed} == {first, second}


def test_fetch_without_wait_is_refused(bench_env, capsys):
    assert main(["launch", "--backend", "local", "--budget", "1", "--fetch"]) == 2
    assert "--fetch fetches the one run --wait followed" in capsys.readouterr().err
