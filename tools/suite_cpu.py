"""Where a test suite run's CPU goes, test by test (developer tool; issue 52 item 11).

    .venv/bin/python tools/suite_cpu.py [--top 40] [--json FILE] [-- PYTEST ARGUMENTS]

Runs pytest from the repository root, by default as `make test` runs the suite (its
environment too), and counts two things:

- in each pytest process, this module as a plugin (`-p tools.suite_cpu`) notes each test's
  own CPU: process_time over its setup, call and teardown;
- beside it, every 0.2 s, /proc: every other process whose environment carries
  PYTEST_CURRENT_TEST (a local run's script, harness and workers, a stand-in's VM, a
  shellcheck inherit it from the test that started them) is counted under that test, at
  the last CPU it was seen with. A fixture's run counts under the test that first asked.

A process shorter than a sample is missed (a git, a `python3 -I -S` of a startup script):
the whole suite's CPU (its children's rusage) is printed beside, so what was missed shows,
and the machine's busy time (/proc/stat), which also holds what no rusage counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUT_ENV = "SUITE_CPU_DIR"  # where each pytest process writes its tests' CPU
SUITE = ["-q", "-n", "4", "--dist", "worksteal"]  # the Makefile's `test`
TICKS = os.sysconf("SC_CLK_TCK")
WORKER_MARKS = ("exec(eval(sys.stdin", "-m pytest")  # xdist's workers, pytest itself


# -- the plugin, in each pytest process ------------------------------------------------------

_tests: list[tuple[str, float, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    _tests.append((item.nodeid, time.process_time() - cpu, time.perf_counter() - wall))


def pytest_sessionfinish(session):
    folder = os.environ.get(OUT_ENV)
    if not folder:
        return
    name = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    own = resource.getrusage(resource.RUSAGE_SELF)
    record = {"tests": _tests, "cpu": own.ru_utime + own.ru_stime}
    Path(folder, f"{name}.json").write_text(json.dumps(record))


# -- the sampler and the report, in this tool's process ----------------------------------------


class Sampler(threading.Thread):
    """The last CPU seen of each process a test started, by (pid, command line)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[tuple[int, str], tuple[str, float]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    self._read(int(entry.name))

    def _read(self, pid: int) -> None:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            if b"PYTEST_CURRENT_TEST=" not in environ:
                return
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, UnicodeDecodeError):
            return
        if any(mark in command for mark in WORKER_MARKS):
            return
        test = environ.split(b"PYTEST_CURRENT_TEST=")[1].split(b"\0")[0].decode(errors="replace")
        cpu = (int(stat[11]) + int(stat[12])) / TICKS
        self.seen[(pid, command[:200])] = (test.rsplit(" (", 1)[0], cpu)


def suite_env(folder: str) -> dict[str, str]:
    """The environment `make test` gives the suite, and where the plugin writes."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = ""
    venv = Path(sys.executable).parents[1]
    env.setdefault("NVCC_TEST_CACHE", str(venv / "nvcc-test-cache"))
    env.setdefault("SHELLCHECK_TEST_CACHE", str(venv / "shellcheck-test-cache"))
    env[OUT_ENV] = folder
    return env


def busy_core_seconds() -> float:
    """The machine's CPU time spent on anything but idle and I/O wait since boot (proc(5))."""
    ticks = [int(word) for word in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / TICKS


def measure(pytest_args: list[str]) -> dict:
    folder = tempfile.mkdtemp(prefix="suite-cpu-")
    sampler = Sampler()
    sampler.start()
    busy = busy_core_seconds()
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-p", "tools.suite_cpu", *pytest_args]
    code = subprocess.run(command, cwd=REPO, env=suite_env(folder), check=False).returncode
    wall = time.perf_counter() - started
    busy = busy_core_seconds() - busy
    sampler.stop.set()
    sampler.join()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    processes = [json.loads(p.read_text()) for p in Path(folder).glob("*.json")]
    return {
        "exit": code,
        "wall_s": wall,
        "cpu_s": children.ru_utime + children.ru_stime,
        "machine_busy_s": busy,
        "pytest_cpu_s": sum(p["cpu"] for p in processes),
        "tests": [t for p in processes for t in p["tests"]],
        "started": [(test, cpu, command) for (_, command), (test, cpu) in sampler.seen.items()],
    }


def report(result: dict, top: int) -> None:
    own = {name: cpu for name, cpu, _ in result["tests"]}
    started: dict[str, float] = collections.defaultdict(float)
    by_program: dict[str, float] = collections.defaultdict(float)
    for test, cpu, command in result["started"]:
        started[test] += cpu
        words = command.split() or ["?"]
        by_program[" ".join([Path(words[0]).name, *words[1:3]])[:70]] += cpu
    print(f"exit {result['exit']}, {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} CPU-s")
    # What the machine spent beyond the suite's rusage: processes left to init (a
    # session's script or server never waited for), kernel threads, anyone else's work.
    print(f"  the machine was busy {result['machine_busy_s']:.1f} core-s meanwhile")
    print(f"  pytest processes' own: {result['pytest_cpu_s']:.1f} CPU-s")
    print(f"  processes the tests started, seen: {sum(started.values()):.1f} CPU-s")
    print(f"\n{'own':>6} {'started':>7}  test (top {top} by both)")
    names = sorted(set(own) | set(started), key=lambda n: -(own.get(n, 0) + started.get(n, 0)))
    for name in names[:top]:
        print(f"{own.get(name, 0.0):6.2f} {started.get(name, 0.0):7.2f}  {name}")
    print(f"\n{'CPU-s':>6}  program of the started processes")
    for program, cpu in sorted(by_program.items(), key=lambda item: -item[1])[:top]:
        print(f"{cpu:6.1f}  {program}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("pytest_args", nargs="*", help="after --; default: the whole suite")
    args = parser.parse_args()
    result = measure(args.pytest_args or SUITE)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    report(result, args.top)
    return result["exit"]


if __name__ == "__main__":
    sys.exit(main())
