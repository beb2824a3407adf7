"""The local backend finds a run's processes by reading /proc, where entries come and go
while it reads (orchestrator/backends/local.py `session_processes`, `process_alive`)."""

from __future__ import annotations

import builtins
import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benches import confinement
from orchestrator.backends import local
from tests.processes import inside_exec

SLEEPER = "import sys, time; print('up', flush=True); time.sleep(60)"


def started(sandbox: str, run_id: str) -> subprocess.Popen:
    """A process in its own session, as the backend starts a run, carrying the run's mark
    and the sandbox in its command line (a test's own session may be 0 or 1 in a container,
    as CI's was, which the backend never asks about)."""
    return subprocess.Popen(
        [sys.executable, "-c", SLEEPER, sandbox],
        env={**os.environ, local.RUN_MARK_ENV: run_id},
        start_new_session=True,
        stdout=subprocess.PIPE,
    )


def test_a_process_gone_while_proc_is_read_is_skipped_not_a_crash(monkeypatch, tmp_path):
    """A process that ends while /proc is listed answers ESRCH for its entry: the run's
    own processes are still found. Seen: `bench launch --fail-on slower` ended with
    "unexpected ProcessLookupError: [Errno 3] No such process: '/proc/31503/stat'" (the
    CI recipe's test, a loaded 2-core machine, 2026-11-29): the glob over /proc raised it."""
    marked = started(str(tmp_path), "run-1")
    assert marked.stdout.readline() == b"up\n"  # past its exec: this test is not about that
    gone = f"/proc/{os.getpid()}/stat"  # listed; made to answer as a process that just ended
    ended = ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH), gone)
    answered = []

    def answering_ended(real):
        def read(path, *args, **kwargs):
            if str(path) == gone:
                answered.append(path)
                raise ended
            return real(path, *args, **kwargs)

        return read

    # Whichever way /proc is read: stat (a glob), lstat, a Path, or the file itself.
    monkeypatch.setattr(os, "stat", answering_ended(os.stat))
    monkeypatch.setattr(os, "lstat", answering_ended(os.lstat))
    monkeypatch.setattr(Path, "read_bytes", answering_ended(Path.read_bytes))
    monkeypatch.setattr(builtins, "open", answering_ended(builtins.open))
    try:
        found = local.session_processes(marked.pid, "run-1")
    finally:
        monkeypatch.undo()
        marked.kill()
        marked.wait()
    assert answered, "the ended process was never read: the test did not reach its case"
    assert marked.pid in found


def test_a_process_inside_its_exec_is_still_found(tmp_path):
    """Popen returns once the child's exec has begun, before the new image's command line
    and environment are mapped: read then, both answer empty (131 of 300 reads of a child's
    environ right after Popen returned, a 2-core machine, 2026-11-30). CI saw it as the
    test above finding none of the run's processes. Read then, a run's script was judged
    ended, and a process of the run could outlive `stop-all`. The window is made to last
    here: the first reads of each file answer empty, as they do inside the exec."""
    process = started(str(tmp_path), "run-1")
    assert process.stdout.readline() == b"up\n"
    try:
        with inside_exec(process.pid, "cmdline", "environ") as left:
            alive = local.process_alive(process.pid, tmp_path)
            found = local.session_processes(process.pid, "run-1")
    finally:
        process.kill()
        process.wait()
    assert set(left.values()) == {0}  # every empty answer was given
    assert alive, "the run's script judged ended"
    assert found == [process.pid], "the run's process missed"


@pytest.mark.slow  # 50 processes started
def test_right_after_popen_the_run_is_found_every_time(tmp_path):
    """The same, unaided: each child read the instant Popen returns, as `launch` may."""
    for attempt in range(50):
        process = started(str(tmp_path), f"run-{attempt}")
        try:
            alive = local.process_alive(process.pid, tmp_path)
            found = local.session_processes(process.pid, f"run-{attempt}")
        finally:
            process.kill()
            process.wait()
        assert alive and found == [process.pid], f"attempt {attempt}: {alive}, {found}"


def test_a_script_that_ended_unreaped_is_not_alive_and_answers_at_once(monkeypatch, tmp_path):
    """A zombie (the controller that started the script has not reaped it) has no command
    line either: it is judged ended, not read again as an exec under way is."""
    process = subprocess.Popen([sys.executable, "-c", "pass", str(tmp_path)])
    while confinement.proc_stat_fields(str(process.pid))[0] != b"Z":
        time.sleep(0.01)
    reads = []
    real_open = builtins.open

    def counting(path, *args, **kwargs):
        reads.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    try:
        alive = local.process_alive(process.pid, tmp_path)
    finally:
        monkeypatch.undo()
        process.wait()
    assert not alive
    assert f"/proc/{process.pid}/cmdline" not in reads
