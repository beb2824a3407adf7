"""The local backend: the startup script runs on this machine, detached, in a sandbox dir.

"Machine" here means the script's session: start spawns the script as the leader of a
session of its own (so it outlives the controller), and the registry remembers its pid,
which is the session id. Stop sends the script SIGTERM (its trap flushes partial results
and writes the manifest), then ends whatever is left of the session, which also finds a
run whose bash was SIGKILLed and left its children behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from benches.confinement import (
    EXEC_REREADS,
    NAMING_PATIENCE_SECONDS,
    proc_file,
    proc_stat_fields,
)
from orchestrator.backends.base import BackendHost, Capabilities, Machine, Placement
from orchestrator.paths import StatePaths
from orchestrator.registry import RunRegistry
from orchestrator.spec import RunSpec

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig
    from orchestrator.stores.local import LocalStore

STOP_GRACE_SECONDS = 30
# Every process of a local run carries this variable (value: the run id), so that after
# its bash is gone the processes it left can still be told apart from anyone else's.
RUN_MARK_ENV = "BENCH_LOCAL_RUN"
LOG_CHUNK_CHARS = 1 << 20  # the most of a run's log read at once


def run_pid(handle: str) -> int | None:
    """The pid a registry handle names, or None: pid 0, -1 and 1 would signal a process
    group, every process of the user, or init, so no handle may name them."""
    try:
        pid = int(handle)
    except (TypeError, ValueError):
        return None
    return pid if pid > 1 else None


def process_alive(pid: int, sandbox: Path) -> bool:
    """True if pid runs, and (where /proc exists) is still our script, not a reused pid."""
    if pid <= 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    if not Path("/proc/self/stat").exists():
        return True
    try:
        # A zombie (a script that ended, not yet reaped by the controller that started it)
        # has no command line: it is not read again and again as an exec under way's.
        if proc_stat_fields(str(pid))[0] == b"Z":
            return False
        cmdline = proc_file(str(pid), "cmdline").decode(errors="replace")
    except (OSError, IndexError):
        return False
    return str(sandbox) in cmdline


def session_processes(session: int, run_id: str) -> list[int]:
    """Live processes of the run's session that carry its mark (a session id stays taken
    while any member lives, so a member cannot belong to someone else's session)."""
    if session <= 1 or not Path("/proc/self/stat").exists():
        return []
    mark = f"{RUN_MARK_ENV}={run_id}".encode() + b"\0"
    found = []
    # An empty environment is read again (benches.confinement.proc_file) only within this:
    # a process started with `env -i` answers empty for good, and a run may start many.
    patience = time.monotonic() + NAMING_PATIENCE_SECONDS
    # Listed, then each entry read in a try: a process that ends meanwhile answers ESRCH,
    # which a glob over /proc raised out of the loop (it ignores only ENOENT and the like).
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = proc_stat_fields(entry)
            state, sid = fields[0], int(fields[3])
            # The environment read only of the session's live members, each file opened
            # without a Path: 3.8 -> 1.5 ms of CPU a call among ~100 processes, and
            # `--wait` calls it at each poll (~600 calls a suite run; issue 52).
            if sid != session or state == b"Z":
                continue
            rereads = EXEC_REREADS if time.monotonic() < patience else 1
            environ = proc_file(entry, "environ", rereads=rereads)
        except (OSError, IndexError):
            continue
        if mark in b"\0" + environ:
            found.append(int(entry))
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        if pid > 1:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


class LocalBackend:
    name = "local"
    capabilities = Capabilities(
        title="local",
        machine_noun="script",
        target_phrase="this machine",
        billed=False,
        machine_from_catalog=False,
        always_has_gpu=False,
        sets_up_python=False,  # the payload runs in the user's python: nothing installed
        keeps_files_here=True,
        release_after_run=False,  # the script's end is the machine's
        script_partial="local",
        phase_model="local",
        phase_model_by_accelerator=False,
        poll_seconds=0.5,  # a look is a file read
        heartbeat_seconds=2,
        reason_window_seconds=0,  # the log is a file here: nothing to wait for
        manifest_grace_seconds=5.0,
        log_outlives_machine=False,  # as before: `status` reads the log while the run runs
    )

    def __init__(
        self,
        paths: StatePaths,
        registry: RunRegistry,
        payload_python: str | None,
        store_root: Path,
    ):
        self.paths = paths
        self.registry = registry
        self.payload_python = payload_python or sys.executable
        self.store_root = store_root
        self.stop_failures: dict[str, str] = {}  # a local script always ends: stays empty

    @classmethod
    def create(cls, host: BackendHost) -> LocalBackend:
        return cls(host.paths, host.registry, host.config.payload_python, host.local_store_root())

    @classmethod
    def create_store(cls, host: BackendHost) -> LocalStore:
        from orchestrator.stores.local import LocalStore

        return LocalStore(host.local_store_root())

    @classmethod
    def require_settings(cls, config: BenchConfig) -> None:
        """This machine needs no settings."""

    @classmethod
    def unsearched_reason(cls, config: BenchConfig) -> str | None:
        return None  # the registry and /proc are always there

    @classmethod
    def chosen_by_auto(cls, config: BenchConfig) -> str | None:
        return None  # the registry's fallback, not a choice of settings

    def work_dir(self, run_id: str) -> str:
        return str(self.paths.sandbox(run_id))

    def template_vars(self) -> dict:
        return {"store_root": str(self.store_root), "payload_python": self.payload_python}

    def instance_request_json(
        self, spec: RunSpec, startup_script: str, shutdown_script: str
    ) -> None:
        return None  # a local run sends no request: the script is all there is

    def refuse_leftovers(self) -> None:
        """A local run leaves no machine behind: its process ends with it."""

    def leftover_note(
        self, run_id: str, disk_usd_per_hour: float, disk_gb: int, cap_seconds: int, most_usd: float
    ) -> str | None:
        return None

    def boot_disk_gb(self) -> int:
        return 0  # this machine's own disk: nothing is billed

    def start(self, spec: RunSpec, startup_script: str, shutdown_script: str) -> Placement:
        sandbox = self.paths.sandbox(spec.run_id)
        sandbox.mkdir(parents=True, exist_ok=True)
        script = sandbox / "startup.sh"
        script.write_text(startup_script)
        (sandbox / "shutdown.sh").write_text(shutdown_script)
        with open(sandbox / "console.log", "ab") as console:
            process = subprocess.Popen(
                ["bash", str(script)],
                cwd=sandbox,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._script_env(spec.run_id),
            )
        # The script writes this file too, once bash is up; written here as well, the run
        # can be found by `stop-all` even when this controller dies the instant start returns.
        (sandbox / "startup.pid").write_text(f"{process.pid}\n")
        return Placement(location="localhost", handle=str(process.pid), spot=False)

    def _script_env(self, run_id: str) -> dict[str, str]:
        # The payload must not pick up the controller's own bench settings by accident.
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
        return {**env, RUN_MARK_ENV: run_id}

    def _processes(self, run_id: str, handle: str) -> list[int]:
        """The run's live processes: its script, or what the script left in its session."""
        pid = run_pid(handle)
        if pid is None:
            return []
        leader = [pid] if process_alive(pid, self.paths.sandbox(run_id)) else []
        return sorted(set(leader + session_processes(pid, run_id)))

    def machine_state(self, run_id: str, placement: Placement) -> str:
        if run_pid(placement.handle) is None:
            return "GONE"
        return "RUNNING" if self._processes(run_id, placement.handle) else "TERMINATED"

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]:
        log = self.paths.sandbox(run_id) / "logs" / "startup.log"
        position = 0
        while True:
            if log.exists():
                with log.open(encoding="utf-8", errors="replace") as f:
                    f.seek(position)
                    # The run writes this file: a line without end must not fill memory.
                    for line in iter(lambda: f.readline(LOG_CHUNK_CHARS), ""):
                        yield line.rstrip("\n")
                    position = f.tell()
            if not follow or self.machine_state(run_id, placement) != "RUNNING":
                if follow and log.exists() and log.stat().st_size > position:
                    continue
                return
            time.sleep(self.capabilities.poll_seconds)

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        """The startup log from byte `offset`, and where the next read starts."""
        log = self.paths.sandbox(run_id) / "logs" / "startup.log"
        if not log.exists():
            return "", offset
        with log.open("rb") as f:
            f.seek(offset)
            data = f.read(LOG_CHUNK_CHARS)
        return data.decode("utf-8", errors="replace"), offset + len(data)

    def release(self, run_id: str, placement: Placement) -> bool:
        """Nothing to delete: the sandbox stays for inspection."""
        return False

    def list_machines(self) -> list[Machine]:
        machines = []
        for record in self.registry.all():
            if record.backend != self.name:
                continue
            handle = record.handle or self._pid_file_handle(record.run_id)
            if run_pid(handle) is not None and self._processes(record.run_id, handle):
                machines.append(Machine(record.run_id, f"pid {handle}", "localhost", "RUNNING"))
        return machines

    def powered_off(self) -> list[Machine]:
        return []  # a script that ended is gone: nothing of it bills

    def delete_command(self, machine: Machine) -> str:
        return f"bench stop-all {machine.run_id}"  # it ends the script's whole session

    def local_files(self, run_id: str, run_key: str) -> list[Path]:
        return [self.paths.sandbox(run_id), self.store_root / run_key]

    def _pid_file_handle(self, run_id: str) -> str:
        """The pid the script wrote at its start: how a run whose controller died before
        recording its handle is still found (checked like any handle before use)."""
        try:
            with open(self.paths.sandbox(run_id) / "startup.pid", "rb") as f:
                return f.read(32).decode("ascii", errors="replace").strip()
        except OSError:
            return ""

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """TERM every script (each flushes and writes its manifest) or, where the script is
        gone, what it left; wait for them; then KILL whatever of each run remains."""
        handles = {m.run_id: m.name.removeprefix("pid ") for m in machines}
        for run_id, handle in handles.items():
            pid = run_pid(handle)
            if pid is None:
                continue
            if process_alive(pid, self.paths.sandbox(run_id)):
                signal_all([pid], signal.SIGTERM)
            else:
                signal_all(session_processes(pid, run_id), signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        pending = dict(handles)
        while pending and time.monotonic() < deadline:
            for run_id, handle in list(pending.items()):
                if not self._processes(run_id, handle):
                    del pending[run_id]
            time.sleep(0.2)
        for run_id, handle in pending.items():
            # Looked up again just before signalling: each pid is still the run's own.
            signal_all(self._processes(run_id, handle), signal.SIGKILL)
        return machines
