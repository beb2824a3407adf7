"""benches/host_load.py reads Linux's schedstat: the time a thread sat runnable while another
process held its core, which the CPU's check of a worker's report takes out of the harness's
bracket (benches/isolation.py, `_compare`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benches import host_load

pytestmark = pytest.mark.skipif(
    host_load.own_thread_wait_ns() is None, reason="no schedstat here (not Linux?)"
)

SPIN = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"


def _busy_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_thread_sharing_its_core_with_a_busy_process_is_seen_waiting():
    """This thread and a busy process on one core for 0.4 s of wall time: the scheduler
    shares the core, so a good part of that wall time is this thread's runqueue wait, which
    the window reads (more load elsewhere only adds to it)."""
    core = min(os.sched_getaffinity(0))
    affinity = os.sched_getaffinity(0)
    window = host_load.LoadWindow(os.getpid())
    hog = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        os.sched_setaffinity(hog.pid, {core})
        os.sched_setaffinity(0, {core})
        time.sleep(0.05)  # the busy process running on the core first
        window.open()
        _busy_for(0.4)
        crowded = window.close()
    finally:
        os.sched_setaffinity(0, affinity)
        hog.kill()
        hog.wait()
    assert crowded is not None and crowded > 0.2 * 400, crowded  # ms; a fair share is ~200


def test_a_process_that_is_gone_has_no_figure():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    window = host_load.LoadWindow(process.pid)
    window.open()
    assert window.close() is None
    assert host_load.LoadWindow(None).close() is None
