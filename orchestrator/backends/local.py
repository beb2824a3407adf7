"""The local backend: the startup script runs on this machine, detached, in a sandbox dir.

"Machine" here means the script's process: start spawns it in its own session (so it
outlives the controller), stop sends it SIGTERM (its trap flushes partial results and
writes the manifest), and the registry remembers its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from orchestrator.backends.base import Machine, Placement
from orchestrator.paths import StatePaths
from orchestrator.registry import RunRegistry
from orchestrator.spec import RunSpec

STOP_GRACE_SECONDS = 30


def process_alive(pid: int, sandbox: Path) -> bool:
    """True if pid runs, and (where /proc exists) is still our script, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            return str(sandbox) in cmdline.read_text(errors="replace")
        except OSError:
            return False
    return True


class LocalBackend:
    name = "local"

    def __init__(self, paths: StatePaths, registry: RunRegistry, payload_python: str | None):
        self.paths = paths
        self.registry = registry
        self.payload_python = payload_python or sys.executable

    def work_dir(self, run_id: str) -> str:
        return str(self.paths.sandbox(run_id))

    def template_vars(self, store_root: Path) -> dict:
        return {"store_root": str(store_root), "payload_python": self.payload_python}

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
                env=self._script_env(),
            )
        return Placement(location="localhost", handle=str(process.pid), spot=False)

    def _script_env(self) -> dict[str, str]:
        # The payload must not pick up the controller's own bench settings by accident.
        return {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}

    def machine_state(self, run_id: str, placement: Placement) -> str:
        if not placement.handle:
            return "GONE"
        alive = process_alive(int(placement.handle), self.paths.sandbox(run_id))
        return "RUNNING" if alive else "TERMINATED"

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]:
        log = self.paths.sandbox(run_id) / "logs" / "startup.log"
        position = 0
        while True:
            if log.exists():
                with log.open(encoding="utf-8", errors="replace") as f:
                    f.seek(position)
                    for line in f:
                        yield line.rstrip("\n")
                    position = f.tell()
            if not follow or self.machine_state(run_id, placement) != "RUNNING":
                if follow and log.exists() and log.stat().st_size > position:
                    continue
                return
            time.sleep(0.5)

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        """The startup log from byte `offset`, and where the next read starts."""
        log = self.paths.sandbox(run_id) / "logs" / "startup.log"
        if not log.exists():
            return "", offset
        with log.open("rb") as f:
            f.seek(offset)
            data = f.read()
        return data.decode("utf-8", errors="replace"), offset + len(data)

    def release(self, run_id: str, placement: Placement) -> bool:
        """Nothing to delete: the sandbox stays for inspection."""
        return False

    def list_machines(self) -> list[Machine]:
        machines = []
        for record in self.registry.all():
            if record.backend != "local" or not record.handle:
                continue
            if process_alive(int(record.handle), self.paths.sandbox(record.run_id)):
                machines.append(
                    Machine(record.run_id, f"pid {record.handle}", "localhost", "RUNNING")
                )
        return machines

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """TERM every script (each flushes and writes its manifest), then wait for them."""
        pids = {m.run_id: int(m.name.removeprefix("pid ")) for m in machines}
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        pending = dict(pids)
        while pending and time.monotonic() < deadline:
            for run_id, pid in list(pending.items()):
                if not process_alive(pid, self.paths.sandbox(run_id)):
                    del pending[run_id]
            time.sleep(0.2)
        for pid in pending.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return machines
