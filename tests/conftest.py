"""Shared fixtures: an isolated bench environment, one cpu-smoke run for the session, the
`gpu` marker's skip, one intra-op thread for torch, and python3 found without a shim."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from results_schema.names import new_run_id

# The stand-ins' fixtures, for every test that names them.
from tests.fakes.fixtures import (  # noqa: F401
    compute_server,
    gcs_bucket,
    gcs_server,
    iam_credentials,
)
from tests.limits import HANG_SECONDS
from tests.processes import shared_folder, sleep_marker, temporary_user

REPO = Path(__file__).resolve().parents[1]

# One intra-op thread for torch here and in every run the tests start (they inherit the
# environment). The suite runs several workers on two shared cores: with a thread per core
# in each, OpenMP's threads spin waiting for a core another worker holds, and a local run
# of a two-config plan took 26 s instead of 13 s under load 5 (measured for issue 31).
# Set before any test module imports torch, which reads it once.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
# pytest-xdist's workers inherit COLUMNS=80 from it; bench reads a stated COLUMNS as a
# reader's terminal and wraps its lines to it (orchestrator/cli/wrap.py). Tests read bench
# as a pipe, unless they state a width themselves (tests/e2e/test_eighty_columns.py).
os.environ.pop("COLUMNS", None)


def _python3_found_directly() -> None:
    """Puts the folder of the interpreter that `python3` resolves to first on PATH.

    Where `python3` is a version manager's shim (pyenv, asdf), every call starts a shell
    and two more programs before python: 75 ms of a 2-core machine's CPU, and the startup
    scripts of the suite's runs call python3 ~400 times (issue 31). The interpreter run is
    the same one the shim would pick (pyenv puts this folder first on PATH itself)."""
    found = shutil.which("python3")
    if found is None:
        return
    resolved = subprocess.run(
        [found, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    ).stdout.strip()
    folder = os.path.dirname(resolved)
    if resolved and folder != os.path.dirname(found):
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ['PATH']}"


_python3_found_directly()


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_finish(session):
    """What collection imported (torch, the cloud clients' generated types, pydantic's
    models) lives to the process's end: out of the garbage collector's way, each full
    collection scans only what the tests make (the 4 workers' garbage collections: 12.4 ->
    9.5 s of CPU, one suite run each, issue 31)."""
    gc.freeze()


class _Refreeze:
    """Frozen again after a test that ran the timing loop in this process: its
    `gc.unfreeze()` (benches/runner.py) hands collection's objects back to the collector,
    and every later full collection of that worker scanned them again (the 4 workers'
    collections: 14.0 -> 7.9 s of CPU a suite run, issue 52). The call is noted as it is
    made: `gc.get_freeze_count()` walks every frozen object (~20 ms a test). What that
    test left in cycles is frozen with the rest: a few of its objects, kept to the end."""

    unfrozen = False
    unfreeze = staticmethod(gc.unfreeze)

    @classmethod
    def noting(cls) -> None:
        cls.unfrozen = True
        cls.unfreeze()


gc.unfreeze = _Refreeze.noting


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    try:
        return (yield)
    finally:
        if _Refreeze.unfrozen:
            _Refreeze.unfrozen = False
            gc.freeze()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = long_tests_first_on_each_worker(items, workers)


def long_tests_first_on_each_worker(items: list, workers: int) -> list:
    """The collection reordered so that the tests marked `long` open the first shares of
    the collection that pytest-xdist's worksteal hands half the workers (at least one;
    contiguous, sizes as its first distribution makes them), dealt to them in turn; the
    rest keep their order.

    A long test waits more than it computes (a minute of sampling until decided, a call
    timeout): started first, its wait overlaps the other workers' work. In its place in
    the collection, the three of test_gate_recipe.py ran last, one after another on one
    worker, the last ~90 s of the suite (issue 52). On every worker at once (4 of 4), the
    machine's two cores were 1.6-1.7 busy for the suite's first 40 s; on half of them,
    the other half keeps both cores busy (1.94-1.98; the suite 219 -> 211 s)."""
    long = [item for item in items if "long" in item.keywords]
    if workers < 2 or not long:
        return items
    rest = [item for item in items if "long" not in item.keywords]
    shares: list[list] = [[] for _ in range(workers)]
    for turn, item in enumerate(long):
        shares[turn % (workers // 2)].append(item)
    left = len(items)
    ordered: list = []
    for index, share in enumerate(shares):
        size = left // (workers - index)  # as xdist's WorkStealingScheduling sends them
        left -= size
        filled = max(0, size - len(share))
        ordered += share + rest[:filled]
        del rest[:filled]
    return ordered + rest


def pytest_unconfigure(config):
    """Each pytest process's objects left to its end: the interpreter's final collection over
    everything torch, matplotlib and the cloud clients made costs ~1.2 s of CPU a process
    (as in benches/__main__.py)."""
    gc.freeze()


@pytest.fixture
def bench_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and state dir of its own, and no BENCH_* (nor a credentials
    file, which `bench setup` reads its caller from) leaking in from outside."""
    for name in list(os.environ):
        if name.startswith("BENCH_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("BENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory):
    """made_once(name, make) -> what make(folder) returned, made once for all xdist workers:
    the first to ask makes it in a folder of the workers' common temporary folder while the
    others wait on a lock, then read it. For real runs that cost a minute of a loaded
    two-core machine each; make returns something json can write, and tests read what it
    made, never write into it (copy it first)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # every worker's basetemp sits in one folder

    def made(name: str, make):
        record = shared / f"{name}.json"
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not record.is_file():
                folder = shared / name
                if folder.exists():
                    pytest.fail(f"{name}: making it failed once already (see that error)")
                folder.mkdir()
                record.write_text(json.dumps(make(folder)))
            return json.loads(record.read_text())

    return made


@pytest.fixture(scope="session")
def cpu_smoke_run(made_once) -> Path:
    """One real cpu-smoke run for the whole session, as the startup script runs it
    (correctness, then run, which reuses the gate), in a folder named by its run id as fetch
    publishes it. Three tests' modules made a copy each before (issue 31)."""

    def make(folder: Path) -> str:
        run_id = new_run_id()
        out = folder / run_id
        common = ["--plan", "cpu-smoke", "--out", str(out), "--run-id", run_id]
        gate = _benches("correctness", *common)
        assert gate.returncode == 0, gate.stderr
        run = _benches("run", *common, "--status-file", str(out / "status.json"))
        assert run.returncode == 0, run.stderr
        assert "correctness:" not in run.stderr  # the gate's rows of this run were reused
        return str(out)

    return Path(made_once("cpu-smoke-run", make))


def _benches(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benches", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )


@pytest.fixture
def marker():
    """A `sleep` argument only the test's processes carry (tests/processes.py)."""
    with sleep_marker() as value:
        yield value


@pytest.fixture
def shared_dir():
    """A folder every user may reach."""
    with shared_folder() as folder:
        yield folder


@pytest.fixture
def kernel_user():
    """A user of the test's own, for tests that drop privileges (they need root)."""
    with temporary_user() as name:
        yield name
