"""Issue 52 item 11: a fast subset to run while editing. `make test-fast` runs the unit
tests less those marked slow, a marker pytest knows (so a typo in it is no silent skip)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_make_test_fast_runs_the_unit_tests_less_the_slow_ones():
    done = subprocess.run(
        ["make", "-n", "test-fast", "BIN=bin", "STAMP="],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    command = next(line for line in done.stdout.splitlines() if "pytest" in line)
    assert re.search(r'-m "not slow and not gpu" tests/unit$', command), command


def test_the_slow_marker_is_declared():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    assert any(m.startswith("slow:") for m in options["ini_options"]["markers"])


class _Item:
    """What the reordering reads of a collected test: its name and its markers."""

    def __init__(self, name: str, long: bool = False):
        self.name = name
        self.keywords = {name: 1, "long": 1} if long else {name: 1}


class _Worker:
    """An xdist worker as its scheduler drives it: it records the tests sent to it."""

    shutting_down = False

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []

    def send_runtest_some(self, indices):
        self.sent += indices


class _Options:
    def __init__(self, workers: int):
        self.workers = workers

    def getvalue(self, name: str):
        assert name == "tx"
        return [f"{self.workers}*popen"]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_half_the_xdist_workers_start_with_the_long_tests(workers):
    """`make test`'s workers (-n 4 --dist worksteal): half of them (at least one) open their
    share with the tests marked long, dealt in turn, all started before any other on that
    worker; the other half start with none; the rest in their collected order: xdist's own
    scheduler hands out the reordered collection."""
    from xdist.scheduler.worksteal import WorkStealingScheduling

    from tests.conftest import long_tests_first_on_each_worker

    items = [_Item(f"t{n}", long=n in (40, 41, 42, 97)) for n in range(101)]
    ordered = long_tests_first_on_each_worker(items, workers)
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)
    rest = [i.name for i in ordered if "long" not in i.keywords]
    assert rest == [i.name for i in items if "long" not in i.keywords]

    scheduler = WorkStealingScheduling(_Options(workers))
    nodes = [_Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, [item.name for item in ordered])
    scheduler.schedule()
    shares = [[ordered[i] for i in node.sent] for node in nodes]
    assert sum(len(share) for share in shares) == len(items)
    opening = workers // 2
    assert all("long" in share[0].keywords for share in shares[:opening])
    assert not any("long" in item.keywords for share in shares[opening:] for item in share)
    for share in shares[:opening]:
        opened = [item for item in share[: 4 // opening] if "long" in item.keywords]
        assert opened == [item for item in share if "long" in item.keywords]
        assert len(opened) == 4 // opening  # dealt in turn: as many each
