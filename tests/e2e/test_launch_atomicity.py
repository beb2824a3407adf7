"""Launch as separate controller processes: the monthly cap holds under concurrent launches,
and a controller killed at any step leaves a run that `bench status` lists.

Each controller is a real `bench launch` in a process of its own; a step is "killed" by
making that process SIGKILL itself right after the step returns (no hook in bench itself).
The controllers are forks of one process per test session that imported bench and Google's
libraries once (about 3 s of CPU an interpreter; nine controllers started an interpreter
each before, issue 31): each fork takes the test's environment and folder, as a fresh
`bench` would, and the racers are as ready as before, when each imported everything
before the start line.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.boundary import UNKNOWN_PAYLOADS
from orchestrator.cli import main
from orchestrator.service.plans import plans_dir
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]

# One line of controller specs in, on stdin: it forks one controller each and answers with
# their pids, then, once every one has ended, with their exit codes (-9: killed), a line
# each. It forks nothing but controllers, and holds no thread: a fork copies one thread.
CONTROLLERS = r"""
import json, os, signal, sys, time, traceback

import google.cloud.compute_v1, google.cloud.storage
from orchestrator.cli import main
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.registry import RunRegistry
from orchestrator.stores.gcs import GcsStore
from orchestrator.stores.local import LocalStore

STEPS = {
    "reserved": [(RunRegistry, "reserve")],
    "payload-stored": [(LocalStore, "put_bytes"), (GcsStore, "put_bytes")],
    "started": [(LocalBackend, "start"), (GceBackend, "start")],
    "none": [],
}

def killed_after(owner, name):
    original = getattr(owner, name)
    def step(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, step)

def controller(spec):
    os.environ.clear()
    os.environ.update(spec["env"])
    os.chdir(spec["cwd"])
    nothing = os.open(os.devnull, os.O_RDONLY)
    output = os.open(spec["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(nothing, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for owner, name in STEPS[spec["step"]]:
        killed_after(owner, name)
    start_line, forker = spec["start_line"], os.getppid()
    if start_line:
        open(f"{start_line}.ready-{os.getpid()}", "w").close()
    while start_line and not os.path.exists(start_line):
        if os.getppid() != forker:  # the test and its forker are gone: no line will come
            os._exit(70)
        time.sleep(0.001)
    code = main(spec["args"])
    sys.stdout.flush()
    sys.stderr.flush()
    return code

for line in sys.stdin:
    pids = []
    for spec in json.loads(line):
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = controller(spec)
            except BaseException:
                traceback.print_exc()  # into the controller's output file
            finally:
                os._exit(code)
        pids.append(pid)
    print(json.dumps(pids), flush=True)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    print(json.dumps(codes), flush=True)
"""


@dataclass
class Controllers:
    """The process that forks controllers (CONTROLLERS) and the lines it has written, read
    by a thread: a line read with another one behind it in the same chunk waits in the
    reader's buffer, where a select on the pipe would not see it."""

    process: subprocess.Popen
    lines: queue.Queue


@pytest.fixture(scope="session")
def controllers():
    """Controllers, started once a session."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-c", CONTROLLERS],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put("")  # the process ended

    threading.Thread(target=read, daemon=True).start()
    yield Controllers(process, lines)
    process.stdin.close()
    process.wait(timeout=HANG_SECONDS)


def answer(controllers: Controllers) -> list[int]:
    """The next line the controllers' process writes, or a failure when it wrote nothing
    for HANG_SECONDS."""
    try:
        line = controllers.lines.get(timeout=HANG_SECONDS)
    except queue.Empty:
        pytest.fail("the controllers' process said nothing")
    assert line, f"the controllers' process ended: {controllers.process.wait()}"
    return json.loads(line)


def start_controllers(controllers, specs: list[tuple[str, list[str], Path, Path | None]]):
    """Forks one `bench launch` per (step, args, output file, start line) in this test's
    environment and folder; returns their pids."""
    request = [
        {
            "step": step,
            "args": args,
            "output": str(output),
            "start_line": str(start_line or ""),
            "env": {**os.environ, "PYTHONPATH": str(REPO)},
            "cwd": os.getcwd(),
        }
        for step, args, output, start_line in specs
    ]
    controllers.process.stdin.write(json.dumps(request) + "\n")
    controllers.process.stdin.flush()
    return answer(controllers)


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
    gce, bench_env, tmp_path, monkeypatch, controllers
):
    monkeypatch.setenv("BENCH_MONTHLY_CAP", "1.50")
    gce.config.run_scripts = False  # what counts is the inserts, not what a VM then runs
    start_line = tmp_path / "go"
    args = ["launch", "--backend", "gce", "--budget", "1.00", "--plan", small_plan(tmp_path)]
    outputs = [tmp_path / f"controller-{n}.out" for n in range(3)]
    start_controllers(controllers, [("none", args, out, start_line) for out in outputs])
    # Every controller waits at the line once it is ready (a fork of a process that imported
    # everything: ready at once).
    deadline = time.monotonic() + HANG_SECONDS
    while len(list(tmp_path.glob("go.ready-*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    start_line.touch()
    codes = sorted(answer(controllers))
    printed = [out.read_text() for out in outputs]
    assert codes == [0, 3, 3], printed
    assert len(gce.calls("instances.insert")) == 1
    refused = [out for out in printed if "monthly cap" in out]
    assert len(refused) == 2, printed


@pytest.mark.parametrize("step", ["reserved", "payload-stored", "started"])
@pytest.mark.parametrize("backend", ["local", "gce"])
def test_a_controller_killed_at_any_launch_step_leaves_a_listed_run(
    backend, step, bench_env, tmp_path, capsys, request, monkeypatch, controllers
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
    output = tmp_path / "controller.out"
    start_controllers(controllers, [(step, args, output, None)])
    (code,) = answer(controllers)
    assert code == -9, output.read_text()
    runs = bench_env / "state" / "runs.sqlite"
    assert runs.exists()
    capsys.readouterr()
    try:
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert "launching" in out, out
        import sqlite3

        with sqlite3.connect(runs) as db:
            ((run_id, payload_sha256),) = list(
                db.execute("SELECT run_id, payload_sha256 FROM runs")
            )
        assert run_id in out
        # Reserved with the sha256 of the payload launch built: fetch holds whatever the run
        # left to it, though the controller never recorded the run `running`.
        assert payload_sha256 not in UNKNOWN_PAYLOADS, payload_sha256
    finally:
        # A started run keeps going without its controller: stop-all still finds it.
        assert main(["stop-all", "--yes"]) == 0
        if step == "started":
            assert "stopped 1 machines" in capsys.readouterr().out
