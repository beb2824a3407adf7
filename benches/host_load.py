"""How long threads sat runnable but not running: the host's load, as Linux counts it.

On the CPU the harness's bracket around a worker's call holds every moment the parent or
the worker was ready to run and another process held the core. Its check of the worker's
own report (benches/isolation.py, CPU_OWN_FRACTION) reads the bracket less that wait, so
that a loaded host does not make an honest report look like a lie (an honest 2.1 ms call
read 13.5 ms at its fastest of 5 samples with four busy processes on 2 cores, and was
refused, 2026-11-29). The figure only ever weakens that check, so it is held to what it
can honestly be: the wait of the worker's main thread (the one that makes the call) and
the parent's, never more than the bracket's wall time; a worker's other threads do not
count, however long they wait (a worker could start them to hide a lie). The sample the
verdict reads is the whole bracket less the calibration, as before. A kernel whose own
threads do its work (an intra-op pool on a machine of many cores) has their waits left
in its bracket: on a loaded host its report reads further under the harness's figure.

The second field of /proc/<pid>/task/<tid>/schedstat is the thread's time spent waiting
on a runqueue, in nanoseconds (the kernel's Documentation/scheduler/sched-stats.rst,
"/proc/<pid>/schedstat"). Where it cannot be read (not Linux, a kernel without
schedstats, /proc hidden) there is no figure and the check reads the bracket whole.
"""

from __future__ import annotations

import time


def _wait_ns(path: str) -> int:
    with open(path, "rb") as f:
        return int(f.read().split()[1])


def main_thread_wait_ns(pid: int) -> int | None:
    """The runqueue wait so far of process `pid`'s main thread, the one a worker makes its
    calls in (benches/worker.py serves its requests there), or None. Its other threads are
    left out: their waits overlap each other and the call's, and a sum over them read
    several times the wall time (four busy threads on one core: 1.2 s of wait in a 0.4 s
    window), which a worker could start on purpose to hide a lie from the check."""
    try:
        return _wait_ns(f"/proc/{pid}/task/{pid}/schedstat")
    except (OSError, ValueError, IndexError):
        return None


def own_thread_wait_ns() -> int | None:
    """The calling thread's runqueue wait so far, or None."""
    try:
        return _wait_ns("/proc/thread-self/schedstat")
    except (OSError, ValueError, IndexError):
        return None


class LoadWindow:
    """The runqueue wait of a worker's main thread and of the calling thread between
    `open` and `close` (ms), at most the window's wall time; None where either cannot be
    read."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self._start: tuple[int, int] | None = None

    def _now(self) -> tuple[int, int] | None:
        if self._pid is None:
            return None
        theirs, ours = main_thread_wait_ns(self._pid), own_thread_wait_ns()
        return None if theirs is None or ours is None else (theirs, ours)

    def open(self) -> None:
        self._start = self._now()
        self._opened = time.perf_counter()

    def close(self) -> float | None:
        end, start = self._now(), self._start
        if end is None or start is None:
            return None
        waited = (end[0] - start[0] + end[1] - start[1]) / 1e6
        # The parent waits for the worker's reply asleep, so the two threads' waits do not
        # overlap: together never more than the window, whatever a counter says.
        return min(max(0.0, waited), (time.perf_counter() - self._opened) * 1e3)
