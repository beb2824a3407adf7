"""Ctrl-C on `launch --wait` leaves the run going and says so; declining stop-all does
nothing; `bench clean` frees finished runs' local state, never a running run's, and an unfetched
run's only when asked, after listing it."""

from __future__ import annotations

import io
import sys

import pytest

import orchestrator.cli.progress
from orchestrator.cli import main
from tests.e2e.test_local_run import only_run_id, small_plan, store_run_dir, wait_for

pytestmark = pytest.mark.timeout(300)


def test_ctrl_c_stop_all_declined_then_clean(bench_env, tmp_path, monkeypatch, capsys):
    state = bench_env / "state"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrator.cli.progress, "follow", interrupted)
    plan = small_plan(tmp_path, samples=4000, heavy=True)  # long enough to still run below
    args = ["launch", "--backend", "local", "--plan", str(plan), "--budget", "1", "--wait"]
    assert main(args) == 130
    err = capsys.readouterr().err
    run_id = only_run_id(state)
    assert f"run {run_id} goes on" in err and "stop-all" in err and f"status {run_id}" in err
    sandbox = state / "sandboxes" / run_id

    # A running run is never cleaned.
    assert main(["clean"]) == 0
    out = capsys.readouterr().out
    assert f"kept run {run_id}: it is still running" in out and sandbox.is_dir()

    # Declining the kill switch's prompt: exit 0, nothing stopped.
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert main(["stop-all"]) == 0
    assert "nothing stopped" in capsys.readouterr().out
    assert main(["status", "--json"]) == 0
    assert '"state": "running"' in capsys.readouterr().out

    assert main(["stop-all", "--yes"]) == 0
    capsys.readouterr()
    wait_for(
        lambda: (
            main(["clean", "--dry-run", "--include-unfetched"]) == 0
            and "would remove" in capsys.readouterr().out
        )
    )
    # Stopped by the kill switch, it says so, not "failed" as its own SIGTERM report reads.
    assert main(["status", "--json"]) == 0
    assert '"state": "stopped' in capsys.readouterr().out  # "stopped (partial)" once it wrote
    assert main(["clean", "--dry-run", "--include-unfetched"]) == 0
    dry = capsys.readouterr().out
    assert str(sandbox) in dry and "would free" in dry and sandbox.is_dir()
    store_copy = store_run_dir(state, run_id)
    assert str(store_copy) in dry and store_copy.is_dir()

    # Nobody fetched it: its store copy is its results' only copy, kept unless asked.
    assert main(["clean"]) == 0
    kept = capsys.readouterr().out
    assert f"kept 1 runs not fetched yet ({run_id})" in kept and "--include-unfetched" in kept
    assert "removed 0 paths" in kept and sandbox.is_dir() and store_copy.is_dir()
    # Asked, it lists them first; declined, nothing goes.
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert main(["clean", "--include-unfetched"]) == 0
    declined = capsys.readouterr().out
    assert "never fetched" in declined and f"  {run_id}\n" in declined
    assert "nothing removed" in declined and sandbox.is_dir() and store_copy.is_dir()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main(["clean", "--include-unfetched"]) == 0
    done = capsys.readouterr().out
    assert f"  {run_id}\n" in done and "removed 2 paths; freed" in done
    assert "freed 0 bytes" not in done
    assert not sandbox.exists() and not store_copy.exists()
    assert main(["status", "--json"]) == 0  # the registry keeps the run
    listed = capsys.readouterr().out
    assert run_id in listed and '"state": "deleted by bench clean"' in listed
    assert main(["status", run_id]) == 0
    assert "deleted by bench clean" in capsys.readouterr().out.replace("\n", " ")
    assert main(["fetch", run_id]) == 5
    assert f"run {run_id} was deleted by bench clean" in capsys.readouterr().err


def test_ctrl_c_while_following_a_sweep_says_its_runs_go_on(
    bench_env, tmp_path, monkeypatch, capsys
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrator.cli.progress, "follow", interrupted)
    plan = small_plan(tmp_path, samples=4000, heavy=True)
    args = ["launch", "--backend", "local", "--gpu", "local", "--plan", str(plan)]
    assert main([*args, "--budget", "1", "--wait"]) == 130
    out, err = capsys.readouterr()
    sweep_id = out.split("bench: sweep ")[1].split(":")[0]
    run_id = only_run_id(bench_env / "state")
    assert f"the sweep's runs go on: {run_id} (its script runs here until" in err
    assert f"status {sweep_id}" in err and "stop-all" in err
    assert main(["stop-all", "--yes"]) == 0
