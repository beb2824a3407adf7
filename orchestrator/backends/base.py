"""The Backend protocol the service layer talks to; it never imports a cloud SDK."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.spec import RunSpec


@dataclass
class Placement:
    """Where a launched run landed, and what the backend tried on the way."""

    location: str  # zone, or "localhost"
    handle: str  # instance name, or the pid of the local script
    attempts: list[str] = field(default_factory=list)  # "us-central1-a: no capacity", ...
    spot: bool = True


@dataclass
class Machine:
    """A machine bench manages, as the backend sees it now."""

    run_id: str
    name: str
    location: str
    state: str  # RUNNING, TERMINATED, ...
    rate_usd_per_hour: float = 0.0


class Backend(Protocol):
    """Everything the service layer calls on a backend, and nothing more."""

    name: str
    # Why each machine the last `stop` could not stop is still there, by machine name.
    stop_failures: dict[str, str]

    def work_dir(self, run_id: str) -> str:
        """Where the run's script keeps its files on its machine."""
        ...

    def template_vars(self) -> dict:
        """What this backend's partial (startup_templates/partials/backend/) needs."""
        ...

    def instance_request_json(
        self, spec: RunSpec, startup_script: str, shutdown_script: str
    ) -> str | None:
        """The request `start` would send, as JSON, for `bench render`; None if none."""
        ...

    def refuse_leftovers(self) -> None:
        """UsageError (nothing created yet) when a machine of this backend could go on
        billing after its run ends and the user has not accepted that."""
        ...

    def leftover_note(self, run_id: str, disk_usd_per_hour: float, disk_gb: int) -> str | None:
        """What an accepted leftover will bill, to print at launch; None when nothing can."""
        ...

    def boot_disk_gb(self) -> int:
        """The boot disk a machine of this backend bills for, in GB, as `start` will ask for
        it: what launch prices (0: no disk is billed)."""
        ...

    def start(self, spec: RunSpec, startup_script: str, shutdown_script: str) -> Placement: ...

    def machine_state(self, run_id: str, placement: Placement) -> str:
        """RUNNING, STOPPING, TERMINATED, PREEMPTED or GONE."""
        ...

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]: ...

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        """Log text from byte `offset` (serial port 1 on gce), and the next offset."""
        ...

    def release(self, run_id: str, placement: Placement) -> bool:
        """Delete what the run leaves behind; True when something was deleted (already
        gone is fine, and False)."""
        ...

    def list_machines(self) -> list[Machine]:
        """Every machine bench manages that is still there."""
        ...

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """Stop/delete these, in parallel, wait, and return those that were stopped."""
        ...
