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


def test_only_the_thread_that_makes_the_call_counts_not_a_workers_other_threads():
    """A worker's other threads waiting for a core are not its call's wait: the window reads
    the thread that makes the call (the worker's main thread). Summed over every thread, a
    worker with four busy threads on one core (its own pool, or started on purpose) read
    several times the window's wall time as wait, which left the harness's fastest sample
    near nothing and let a clock divided by 20 pass the CPU's rule (the cheat suite's
    `timer_patch`, a loaded 2-core machine, 2026-11-29)."""
    core = min(os.sched_getaffinity(0))
    crowd = (
        "import hashlib, os, threading, time\n"
        f"os.sched_setaffinity(0, {{{core}}})\n"
        "block = bytes(1 << 20)\n"
        "def hash_forever():\n"
        "    while True:\n"
        "        hashlib.sha256(block).digest()  # without the GIL: four threads, one core\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=hash_forever, daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", crowd])
    try:
        time.sleep(0.5)  # the threads started and crowding their core
        window = host_load.LoadWindow(worker.pid)
        window.open()
        time.sleep(0.4)
        waited = window.close()
    finally:
        worker.kill()
        worker.wait()
    assert waited is not None and waited < 0.25 * 400, waited  # ms of a 400 ms window
