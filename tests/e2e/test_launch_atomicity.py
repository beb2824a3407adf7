"""Launch as separate controller processes: the monthly cap holds under concurrent launches,
and a controller killed at any step leaves a run that `bench status` lists.

Each controller is a real `bench launch` in a child process; a step is "killed" by making
the child SIGKILL itself right after that step returns (no hook in bench itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.service.plans import plans_dir
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]

CONTROLLER = r"""
import os, signal, sys, time

from orchestrator.cli import main
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.registry import RunRegistry
from orchestrator.stores.gcs import GcsStore
from orchestrator.stores.local import LocalStore

def killed_after(owner, name):
    original = getattr(owner, name)
    def step(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, step)

STEPS = {
    "reserved": [(RunRegistry, "reserve")],
    "payload-stored": [(LocalStore, "put_bytes"), (GcsStore, "put_bytes")],
    "started": [(LocalBackend, "start"), (GceBackend, "start")],
    "none": [],
}
step, start_line = sys.argv[1], sys.argv[2]
for owner, name in STEPS[step]:
    killed_after(owner, name)
if start_line:  # the racers: Google's libraries (3 s of CPU) loaded before the start line
    import google.cloud.compute_v1, google.cloud.storage
    open(f"{start_line}.ready-{os.getpid()}", "w").close()
while start_line and not os.path.exists(start_line):
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


def controller(step: str, args: list[str], start_line: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, step, str(start_line or ""), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def small_plan(tmp_path: Path) -> str:
    plan = json.loads((plans_dir() / "cpu-smoke.json").read_text())
    plan.update(name="atomicity", samples_per_config=3, configs=plan["configs"][:1])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return str(path)


@pytest.fixture
def gce(gce, monkeypatch):
    """The e2e gce fixture (the fake VM's python3 is this test's, so its environment phase
    installs nothing), with one zone."""
    monkeypatch.setenv("BENCH_ZONES", "us-central1-a")
    return gce


def test_three_concurrent_launches_under_a_cap_that_fits_one_start_one(
    gce, bench_env, tmp_path, monkeypatch
):
    monkeypatch.setenv("BENCH_MONTHLY_CAP", "1.50")
    gce.config.run_scripts = False  # what counts is the inserts, not what a VM then runs
    start_line = tmp_path / "go"
    args = ["launch", "--backend", "gce", "--budget", "1.00", "--plan", small_plan(tmp_path)]
    children = [controller("none", args, start_line) for _ in range(3)]
    # Every child imports everything and waits at the line (one that ended early: its output
    # says why, below).
    deadline = time.monotonic() + HANG_SECONDS
    while len(list(tmp_path.glob("go.ready-*"))) < 3 and time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            break
        time.sleep(0.05)
    start_line.touch()
    outputs = [child.communicate(timeout=HANG_SECONDS)[0] for child in children]
    codes = sorted(child.returncode for child in children)
    assert codes == [0, 3, 3], outputs
    assert len(gce.calls("instances.insert")) == 1
    refused = [out for out in outputs if "monthly cap" in out]
    assert len(refused) == 2, outputs


@pytest.mark.parametrize("step", ["reserved", "payload-stored", "started"])
@pytest.mark.parametrize("backend", ["local", "gce"])
def test_a_controller_killed_at_any_launch_step_leaves_a_listed_run(
    backend, step, bench_env, tmp_path, capsys, request, monkeypatch
):
    if backend == "gce":
        request.getfixturevalue("gce")
    else:
        # A payload interpreter that waits, so the run outlives the controller.
        python = tmp_path / "python"
        python.write_text("#!/bin/sh\nexec sleep 60\n")
        python.chmod(0o755)
        monkeypatch.setenv("BENCH_PAYLOAD_PYTHON", str(python))
    args = ["launch", "--backend", backend, "--budget", "1.00", "--plan", small_plan(tmp_path)]
    child = controller(step, args)
    output = child.communicate(timeout=HANG_SECONDS)[0]
    assert child.returncode == -9, output
    runs = bench_env / "state" / "runs.sqlite"
    assert runs.exists()
    capsys.readouterr()
    try:
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert "launching" in out, out
        import sqlite3

        with sqlite3.connect(runs) as db:
            (run_id,) = [row[0] for row in db.execute("SELECT run_id FROM runs")]
        assert run_id in out
    finally:
        # A started run keeps going without its controller: stop-all still finds it.
        assert main(["stop-all", "--yes"]) == 0
        if step == "started":
            assert "stopped 1 machines" in capsys.readouterr().out
