"""Real processes in tests of what a step leaves running (benches/confinement.py): finding
them by a marker only they carry, a folder every user may reach, and a user of a test's
own."""

from __future__ import annotations

import builtins
import io
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def processes_running(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose command line holds `marker`."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in text and state != "Z" and "pytest" not in text:
            found[int(cmdline.parent.name)] = text
    return found


@contextmanager
def inside_exec(pid: int, *names: str, reads: int = 3) -> Iterator[dict[str, int]]:
    """The window in which a process inside its exec answers an empty command line and
    environment, made to last: the first `reads` reads (by `open`) of each /proc/<pid>/<name>
    answer empty. Yields the reads left of each path, all 0 once every one was given."""
    left = {f"/proc/{pid}/{name}": reads for name in names}
    real_open = builtins.open

    def opening(path, *args, **kwargs):
        if left.get(str(path)):
            left[str(path)] -= 1
            return io.BytesIO(b"")
        return real_open(path, *args, **kwargs)

    builtins.open = opening
    try:
        yield left
    finally:
        builtins.open = real_open


@contextmanager
def sleep_marker() -> Iterator[str]:
    """A `sleep` argument no other process has (sleep takes fractions: append digits to it);
    whatever still runs with it afterwards is killed, so a failing test leaves nothing."""
    value = f"300.{secrets.randbelow(10**9):09d}"
    try:
        yield value
    finally:
        for pid in processes_running(f"sleep {value}"):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def shared_folder() -> Iterator[Path]:
    """A folder every user may reach (pytest's own temporary folders are closed to others)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-shared-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def temporary_user() -> Iterator[str]:
    """A system user of the test's own, removed after: every process of a kernel user is
    ended, so never a user anything else runs as (needs root)."""
    name = f"bench-t{secrets.token_hex(4)}"
    subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def uid_of(user: str) -> int:
    return int(subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
