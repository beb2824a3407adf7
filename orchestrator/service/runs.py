"""Reading a run's state: registry + heartbeat + manifest + what the backend says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from orchestrator import boundary
from orchestrator.backends.base import Placement
from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from results_schema import Manifest, Status


@dataclass
class RunView:
    record: RunRecord
    status: Status | None
    manifest: Manifest | None
    machine: str  # RUNNING, TERMINATED, GONE, ...
    problem: str | None = None  # why the run's files were refused at the trust boundary

    @property
    def state(self) -> str:
        if self.problem is not None:
            return "invalid"
        if self.manifest is not None:
            if self.manifest.reason.startswith("preempted"):
                return f"preempted ({self.manifest.status})"
            return self.manifest.status
        if self.machine in ("RUNNING", "PROVISIONING", "STAGING"):
            return "running"
        if self.machine == "PREEMPTED":
            return "preempted"
        return "lost" if self.record.state == "running" else self.record.state

    @property
    def cost_usd(self) -> float:
        """What the run has cost so far: the manifest's estimate once it ended, else rate ×
        elapsed with GCE's one-minute minimum."""
        if self.manifest is not None and self.manifest.cost is not None:
            return self.manifest.cost.estimated_usd or 0.0
        return self.record.rate_usd_per_hour * max(self.elapsed_seconds, 60.0) / 3600.0

    @property
    def elapsed_seconds(self) -> float:
        end = datetime.now(timezone.utc)
        if self.manifest is not None:
            end = self.manifest.finished_at
        return (end - self.record.created).total_seconds()


def placement_of(record: RunRecord) -> Placement:
    return Placement(location=record.location, handle=record.handle, attempts=record.attempts)


def view(ctx: Context, record: RunRecord) -> RunView:
    """What is known of one run. A run whose files fail the trust boundary is shown with
    its problem rather than stopping the listing of every other run."""
    store = ctx.store(record.backend)
    problems, manifest, status = [], None, None
    try:
        manifest = boundary.read_manifest(store, record)
    except ResultsError as e:
        problems.append(str(e))
    try:
        status = boundary.read_status(store, record)
    except ResultsError as e:
        problems.append(str(e))
    machine = "GONE"
    # A fetched run's machine was released, and one that never got a handle has none to
    # ask about: no need to ask the cloud.
    if record.handle and (manifest is None or record.state in ("running", "stopped")):
        machine = ctx.backend(record.backend).machine_state(record.run_id, placement_of(record))
    return RunView(record, status, manifest, machine, "; ".join(problems) or None)


def views(ctx: Context, run_id: str | None = None) -> list[RunView]:
    records = [ctx.registry.get(run_id)] if run_id else ctx.registry.all()
    return [view(ctx, record) for record in records]


def latest_run_id(ctx: Context) -> str:
    records = ctx.registry.all()
    if not records:
        raise NotFoundError("no runs yet; start one with `bench launch --budget 1.00`")
    return records[-1].run_id
