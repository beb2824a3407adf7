"""The local backend finds a run's processes by reading /proc, where entries come and go
while it reads (orchestrator/backends/local.py `session_processes`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.backends import local


def test_a_process_gone_while_proc_is_read_is_skipped_not_a_crash(monkeypatch):
    """A process that ends while /proc is listed answers ESRCH for its entry: the run's
    own processes are still found. Seen: `bench launch --fail-on slower` ended with
    "unexpected ProcessLookupError: [Errno 3] No such process: '/proc/31503/stat'" (the
    CI recipe's test, a loaded 2-core machine, 2026-11-29): the glob over /proc raised it."""
    # Its own session, as the backend starts a run: a test's session may be 0 or 1 in a
    # container (CI's was), which the backend never asks about.
    marked = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, local.RUN_MARK_ENV: "run-1"},
        start_new_session=True,
    )
    gone = f"/proc/{os.getpid()}/stat"  # listed; made to answer as a process that just ended
    ended = ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH), gone)

    def answering_ended(real):
        def read(path, *args, **kwargs):
            if str(path) == gone:
                raise ended
            return real(path, *args, **kwargs)

        return read

    # Whichever way /proc is read: stat (a glob), lstat, or the file itself.
    monkeypatch.setattr(os, "stat", answering_ended(os.stat))
    monkeypatch.setattr(os, "lstat", answering_ended(os.lstat))
    monkeypatch.setattr(Path, "read_bytes", answering_ended(Path.read_bytes))
    try:
        found = local.session_processes(marked.pid, "run-1")
    finally:
        monkeypatch.undo()
        marked.kill()
        marked.wait()
    assert marked.pid in found
