"""How long threads sat runnable but not running: the host's load, as Linux counts it.

On the CPU the harness's bracket around a worker's call holds every moment the parent or
the worker was ready to run and another process held the core. Its check of the worker's
own report (benches/isolation.py, CPU_OWN_FRACTION) reads the bracket less that wait, so
that a loaded host does not make an honest report look like a lie (an honest 2.1 ms call
read 13.5 ms at its fastest of 5 samples with four busy processes on 2 cores, and was
refused, 2026-11-29). The figure only ever weakens that check (a worker that loads the
host itself only lengthens its own wait): the sample the verdict reads is the whole
bracket less the calibration, as before.

The second field of /proc/<pid>/task/<tid>/schedstat is the thread's time spent waiting
on a runqueue, in nanoseconds (the kernel's Documentation/scheduler/sched-stats.rst,
"/proc/<pid>/schedstat"). Where it cannot be read (not Linux, a kernel without
schedstats, /proc hidden) there is no figure and the check reads the bracket whole.
"""

from __future__ import annotations

import os


def _wait_ns(path: str) -> int:
    with open(path, "rb") as f:
        return int(f.read().split()[1])


def process_wait_ns(pid: int) -> int | None:
    """The summed runqueue wait of every thread of process `pid` so far, or None."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for tid in tasks:
            try:
                total += _wait_ns(f"/proc/{pid}/task/{tid}/schedstat")
            except FileNotFoundError:
                continue  # a thread that ended between the listing and the read
    except (OSError, ValueError, IndexError):
        return None
    return total


def own_thread_wait_ns() -> int | None:
    """The calling thread's runqueue wait so far, or None."""
    try:
        return _wait_ns("/proc/thread-self/schedstat")
    except (OSError, ValueError, IndexError):
        return None


class LoadWindow:
    """The runqueue wait of a worker's threads and of the calling thread between `open`
    and `close` (ms); None where either cannot be read."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self._start: tuple[int, int] | None = None

    def _now(self) -> tuple[int, int] | None:
        if self._pid is None:
            return None
        theirs, ours = process_wait_ns(self._pid), own_thread_wait_ns()
        return None if theirs is None or ours is None else (theirs, ours)

    def open(self) -> None:
        self._start = self._now()

    def close(self) -> float | None:
        end, start = self._now(), self._start
        if end is None or start is None:
            return None
        # A thread that ended inside the window takes its wait out of the sum: never below 0.
        return max(0, end[0] - start[0]) / 1e6 + max(0, end[1] - start[1]) / 1e6
