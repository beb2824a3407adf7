"""The "machine" of a fake instance: the startup script in a sandboxed subprocess.

Layout of a sandbox root (a fresh temp dir per instance):
  bin/       shims prepended to PATH: `shutdown`, `poweroff`, `halt` POST to the stand-in
  work/      the script's working directory
  home/ tmp/ HOME and TMPDIR, so nothing lands in the developer's home
  startup-script, shutdown-script   the metadata values, run as `bash FILE`

The script runs in its own session (process group) so that a power-off can signal it and
everything it started at once: SIGTERM, a grace period, then SIGKILL, as GCE does on
preemption. Its stdout and stderr go to the instance's serial port 1, line by line, prefixed
like google_metadata_script_runner does on a real VM.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

_SHUTDOWN_SHIM = """#!/usr/bin/env bash
# shutdown(8) of a fake VM: hands the arguments to the stand-in, which powers the instance
# off ("now") or schedules it ("+N" minutes, "-c" cancels). Like the real command, it
# returns before the machine goes down.
printf '%s\\n' "$@" | curl -fsS -X POST -H 'Content-Type: text/plain' \\
    --data-binary @- {url} >/dev/null
"""

_POWEROFF_SHIM = """#!/usr/bin/env bash
# {name}(8) of a fake VM: an immediate power-off.
exec shutdown -h now
"""


class VmSandbox:
    """One fake VM's processes and files."""

    def __init__(
        self,
        root: Path,
        instance_name: str,
        poweroff_url: str,
        env: dict[str, str],
        serial_write: Callable[[str], None],
    ) -> None:
        self.root = root
        self.workdir = root / "work"
        self._name = instance_name
        self._serial_write = serial_write
        self._procs: list[tuple[subprocess.Popen[bytes], threading.Thread]] = []
        self._lock = threading.Lock()
        self.halted = threading.Event()
        self.startup_exit_code: int | None = None
        for sub in ("bin", "work", "home", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._write_shims(poweroff_url)
        self._env = dict(env)
        self._env.update(
            PATH=f"{root / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}",
            HOME=str(root / "home"),
            TMPDIR=str(root / "tmp"),
            BENCH_FAKE_VM_ROOT=str(root),
        )

    def _write_shims(self, poweroff_url: str) -> None:
        shims = {"shutdown": _SHUTDOWN_SHIM.format(url=shlex.quote(poweroff_url))}
        for name in ("poweroff", "halt"):
            shims[name] = _POWEROFF_SHIM.format(name=name)
        for name, text in shims.items():
            path = self.root / "bin" / name
            path.write_text(text)
            path.chmod(0o755)

    # -- running scripts -----------------------------------------------------------------

    def _run(self, key: str, script: str) -> subprocess.Popen[bytes]:
        path = self.root / key
        path.write_text(script)
        proc = subprocess.Popen(
            ["bash", str(path)],
            cwd=self.workdir,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        reader = threading.Thread(target=self._pump, args=(key, proc), daemon=True)
        reader.start()
        with self._lock:
            self._procs.append((proc, reader))
        return proc

    def _pump(self, key: str, proc: subprocess.Popen[bytes]) -> None:
        prefix = f"{self._name} google_metadata_script_runner[{proc.pid}]: {key}: "
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self._serial_write(prefix + raw.decode("utf-8", "replace").rstrip("\n") + "\n")
        code = proc.wait()
        if key == "startup-script":
            self.startup_exit_code = code
        self._serial_write(
            f"{self._name} google_metadata_script_runner[{proc.pid}]: "
            f'Script "{key}" finished with exit status {code}\n'
        )

    def start(self, startup_script: str | None) -> None:
        self._serial_write(f"{self._name} fake-vm: booted in {self.root}\n")
        if startup_script is not None:
            self._run("startup-script", startup_script)

    def session_ids(self) -> set[int]:
        """Each script leads its own session, so its pid is the session id."""
        with self._lock:
            return {proc.pid for proc, _ in self._procs}

    def startup_finished(self) -> bool:
        with self._lock:
            return all(p.poll() is not None and not r.is_alive() for p, r in self._procs)

    # -- power-off -----------------------------------------------------------------------

    def _signal_all(self, signum: int) -> None:
        """Every process of the VM: each script's session, not only its process group
        (`timeout` puts a phase in a group of its own; a real power-off spares nothing)."""
        sessions = self.session_ids()
        for pid in sorted(sessions | set(_session_members(sessions))):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def power_off(self, grace_s: float, shutdown_script: str | None) -> None:
        """Starts the ACPI soft-off in a thread; `halted` is set once all is dead."""
        threading.Thread(
            target=self._power_off, args=(grace_s, shutdown_script), daemon=True
        ).start()

    def _power_off(self, grace_s: float, shutdown_script: str | None) -> None:
        self._signal_all(signal.SIGTERM)
        if shutdown_script is not None:
            try:
                self._run("shutdown-script", shutdown_script)
            except OSError as exc:  # best effort, as on GCE
                self._serial_write(f"{self._name} fake-vm: shutdown-script failed: {exc}\n")
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self.startup_finished():
            time.sleep(0.02)
        self.kill_now()

    def kill_now(self) -> None:
        """Hard power-off: SIGKILL to every process group the VM started."""
        self._signal_all(signal.SIGKILL)
        with self._lock:
            procs = list(self._procs)
        for proc, reader in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            reader.join(timeout=2)
        self._serial_write(f"{self._name} fake-vm: powered off\n")
        self.halted.set()


def _session_members(sessions: set[int]) -> list[int]:
    """Live pids whose session id is one of `sessions` (Linux /proc; none elsewhere)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The fields after the command name, which may itself hold spaces or parentheses.
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
            if int(fields[3]) in sessions and fields[0] != b"Z":
                members.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return members
