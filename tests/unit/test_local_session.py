"""The local backend finds a run's processes by reading /proc, where entries come and go
while it reads (orchestrator/backends/local.py `session_processes`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from orchestrator.backends import local


def test_a_process_gone_while_proc_is_read_is_skipped_not_a_crash(monkeypatch):
    """A process that ends while /proc is listed answers ESRCH for its entry: the run's
    own processes are still found. Seen: `bench launch --fail-on slower` ended with
    "unexpected ProcessLookupError: [Errno 3] No such process: '/proc/31503/stat'" (the
    CI recipe's test, a loaded 2-core machine, 2026-11-29): the glob over /proc raised it."""
    marked = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, local.RUN_MARK_ENV: "run-1"},
    )
    gone = os.getppid()  # listed in /proc; made to answer as a process that just ended
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path) == f"/proc/{gone}/stat":
            raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH), str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    try:
        found = local.session_processes(os.getsid(0), "run-1")
    finally:
        monkeypatch.undo()
        marked.kill()
        marked.wait()
    assert marked.pid in found
