"""Reading a run's state: registry + heartbeat + manifest + what the backend says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from orchestrator import boundary
from orchestrator.backends import registry as registered
from orchestrator.backends.base import Machine, Placement
from orchestrator.errors import BenchError, NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.spec import is_sweep_id
from results_schema import Manifest, Status
from results_schema.kernel_contract import build_failure_lines
from results_schema.record import billed_usd

# The EXIT trap's last log line; the serial console carries it even when the bucket
# refused the manifest (a VM account without bucket access).
_FINISHED_LINE = re.compile(
    r"\[bench [0-9:]+\] run (?P<run>\S+) finished: (?P<state>[a-z]+)(?: \((?P<why>.*)\))?$"
)
_MAX_REASON = 300


@dataclass
class RunView:
    record: RunRecord
    status: Status | None
    manifest: Manifest | None
    machine: str  # RUNNING, TERMINATED, GONE, ...
    problem: str | None = None  # why the run's files were refused at the trust boundary
    console_reason: str = ""  # why it ended, from the serial output, when no manifest came

    @property
    def state(self) -> str:
        if self.problem is not None:
            return "invalid"
        if self.manifest is None and self.record.cleaned_at and self.record.awaiting_fetch:
            return "deleted by bench clean"  # before anyone fetched it
        if self.record.state == "stopped":  # by stop-all: its own report says only SIGTERM
            return f"stopped ({self.manifest.status})" if self.manifest else "stopped"
        if self.manifest is not None:
            if self.manifest.reason.startswith("preempted"):
                return f"preempted ({self.manifest.status})"
            return self.manifest.status
        if self.console_reason:
            return "failed"
        if self.machine == "WAITING":  # the cloud holds it until it has capacity
            return "waiting for capacity"
        if self.machine in ("RUNNING", "PROVISIONING", "STAGING"):
            return "running"
        if self.machine == "PREEMPTED":
            return "preempted"
        return "lost" if self.record.state == "running" else self.record.state

    @property
    def cost_usd(self) -> float:
        """What the run has cost so far: what the registry recorded once it ended there
        (fetch's reckoning), else the manifest's estimate once it ended, else nothing while
        it waits for capacity, else rate × elapsed with GCE's one-minute minimum."""
        if self.record.finished and self.record.cost_usd is not None:
            return self.record.cost_usd
        if self.manifest is not None and self.manifest.cost is not None:
            return self.manifest.cost.estimated_usd or 0.0
        if self.machine == "WAITING":
            return 0.0
        return billed_usd(self.record.rate_usd_per_hour, self.elapsed_seconds)

    @property
    def progress(self) -> tuple[str, int | None, int | None]:
        """(phase, done, total): the live heartbeat's; once a run ended, the samples its
        manifest holds of those planned (a partial run's last heartbeat says finish 0/0,
        which would hide how far it got)."""
        heartbeat, manifest = self.status, self.manifest
        phase = heartbeat.phase if heartbeat else "-"
        if heartbeat and heartbeat.total:
            return phase, heartbeat.done, heartbeat.total
        measured = manifest.file("results/measurements.csv") if manifest else None
        if measured is not None and measured.rows is not None and manifest.plan is not None:
            plan = manifest.plan
            # Samples a config had at the look sampling stopped at, else the plan's.
            each = manifest.sampling.samples_per_config if manifest.sampling else None
            planned = (each or plan.samples_per_config) * len(plan.configs)
            return phase, measured.rows, planned * len(plan.identities)
        return phase, None, None

    @property
    def build_failures(self) -> list[str]:
        """'<kernel>: build failed: <its last line>' for each user kernel of the run whose
        build failed (its manifest's user_builds; VM text, for the caller to escape)."""
        manifest = self.manifest
        if manifest is None or manifest.plan is None:
            return []
        return build_failure_lines(manifest.user_builds, manifest.plan.identities)

    @property
    def ab_overall(self):
        """An ended A/B run's geometric mean, judged as the gate judges it (None before)."""
        return self.manifest.ab_overall() if self.manifest else None

    def as_dict(self) -> dict:
        """What `bench status --json` prints of this run."""
        phase, done, total = self.progress
        record = self.record
        return {
            "run_id": record.run_id,
            "sweep_id": record.sweep_id or None,
            "backend": record.backend,
            "gpu": record.gpu or None,
            "plan": record.plan,
            "state": self.state,
            "phase": phase,
            "done": done,
            "total": total,
            "elapsed_seconds": round(self.elapsed_seconds, 1),
            "cost_usd": round(self.cost_usd, 6),
            "budget_usd": record.budget_usd,
            "reason": (self.manifest.reason if self.manifest else self.console_reason) or None,
            "build_failures": self.build_failures or None,
            # The A/A control's one decision on the run: "noisy" means its verdicts are not
            # reliable (benches/noise.py); None before the run ends or without a control.
            "noise": self.manifest.noise.verdict if self.manifest and self.manifest.noise else None,
            # An A/B run's geometric mean judged at the run's margin (results_schema/verdicts).
            "ab_verdict": self.ab_overall.verdict if self.ab_overall else None,
            # Why its timing stopped sampling (results_schema/sampling.py: STOPS).
            "sampling": self.manifest.sampling.stopped
            if self.manifest and self.manifest.sampling
            else None,
            "problem": self.problem,
        }

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
    reason = ""
    # No heartbeat ever reached the store: the VM may not write it. Its console says why,
    # while it runs (GCE serves serial output only then; the VM waits a little for us).
    ended_log = ctx.capabilities(record.backend).log_outlives_machine and machine == "TERMINATED"
    if manifest is None and ((status is None and machine in ("RUNNING", "STOPPING")) or ended_log):
        reason = console_reason(ctx, record)
    return RunView(
        record, status, manifest, machine, "; ".join(problems) or None, console_reason=reason
    )


def console_reason(ctx: Context, record: RunRecord) -> str:
    """Why a run that left no manifest ended, from its VM's serial output (untrusted:
    printable characters only, bounded); "" when the log does not say."""
    try:
        text, _ = ctx.backend(record.backend).log_since(record.run_id, placement_of(record), 0)
    except BenchError:
        return ""
    for line in reversed(text.replace("\r\n", "\n").split("\n")):
        found = _FINISHED_LINE.search(line.strip())
        if found and found["run"] == record.run_id and found["state"] != "complete":
            why = "".join(c for c in (found["why"] or found["state"]) if c.isprintable())
            return why[:_MAX_REASON]
    return ""


def views(ctx: Context, run_id: str | None = None) -> list[RunView]:
    records = records_for(ctx, run_id) if run_id else ctx.registry.all()
    return [view(ctx, record) for record in records]


@dataclass
class Listing:
    """The runs `status` can show, and one line on those it could not read."""

    views: list[RunView]
    unreadable: str = ""


def listing(ctx: Context, run_id: str | None = None) -> Listing:
    """The named run or sweep (its errors are the command's), else every run whose backend
    can be read: a backend that cannot (no project configured, no credentials) costs only
    its own runs, named in one line, never the others' listing."""
    if run_id:
        return Listing(views(ctx, run_id))
    shown: list[RunView] = []
    skipped: dict[str, tuple[str, list[str]]] = {}  # backend -> (why, its run ids)
    for record in ctx.registry.all():
        if record.backend in skipped:  # asked once: the same answer would only cost time
            skipped[record.backend][1].append(record.run_id)
            continue
        try:
            shown.append(view(ctx, record))
        except BenchError as error:
            skipped[record.backend] = (str(error), [record.run_id])
    return Listing(shown, _unreadable_line(skipped))


def _unreadable_line(skipped: dict[str, tuple[str, list[str]]]) -> str:
    parts = []
    for backend, (why, run_ids) in skipped.items():
        named = ", ".join(run_ids[:3]) + (", ..." if len(run_ids) > 3 else "")
        runs = "run" if len(run_ids) == 1 else "runs"
        parts.append(f"{len(run_ids)} {backend} {runs} ({named}): {why}")
    return f"bench: could not read {'; '.join(parts)}" if parts else ""


def records_for(ctx: Context, ref: str) -> list[RunRecord]:
    """A run id names that run; a sweep id (`launch --gpu a,b`) names each of its members."""
    if not is_sweep_id(ref):
        return [ctx.registry.get(ref)]
    members = ctx.registry.sweep_members(ref)
    if not members:
        raise NotFoundError(
            f"no sweep {ref} in the registry {ctx.registry.path}; see `bench status`"
        )
    return members


def latest_run_id(ctx: Context) -> str:
    records = ctx.registry.all()
    if not records:
        raise NotFoundError("no runs yet; start one with `bench launch --budget 1.00`")
    return records[-1].run_id


@dataclass
class Leftover:
    """A powered-off bench machine: no machine charge, but its disk bills until deleted."""

    machine: Machine
    remove_with: str  # the one command that deletes it


def leftovers(ctx: Context, known: list[RunView]) -> list[Leftover]:
    """Every powered-off bench machine of every backend these settings let us search,
    priced, with the command that removes it: `bench fetch` for a finished run of this
    registry, else the backend's own delete of that machine."""
    finished = {v.record.run_id for v in known if v.manifest is not None}
    found = []
    for name in registered.searchable(ctx.config):
        backend = ctx.backend(name)
        for machine in backend.powered_off():
            if machine.run_id in finished:
                command = f"bench fetch {machine.run_id}"
            else:
                command = backend.delete_command(machine)
            found.append(Leftover(machine, command))
    return found
