"""stop-all: the kill switch. Finds every bench machine on every backend, stops them all."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.backends import registry as registered
from orchestrator.backends.base import Machine
from orchestrator.errors import BenchError, CloudError
from orchestrator.service.context import Context


@dataclass
class Found:
    machines: dict[str, list[Machine]] = field(default_factory=dict)  # backend -> machines
    skipped: dict[str, BenchError] = field(default_factory=dict)  # backend -> search failed
    not_configured: dict[str, str] = field(default_factory=dict)  # its title -> why not searched

    @property
    def count(self) -> int:
        return sum(len(m) for m in self.machines.values())

    @property
    def hourly_spend(self) -> float:
        return sum(m.rate_usd_per_hour for ms in self.machines.values() for m in ms)


def find_machines(ctx: Context) -> Found:
    """Every backend's machines that these settings let it search (local always; a cloud
    whenever its project is configured: no local state needed)."""
    found = Found(not_configured=registered.unsearched(ctx.config))
    for name in registered.searchable(ctx.config):
        try:
            found.machines[name] = ctx.backend(name).list_machines()
        except BenchError as e:
            found.skipped[name] = e
    return found


def only_runs(found: Found, run_ids: set[str]) -> Found:
    """The machines of these runs only (`stop-all RUN|SWEEP`); searches as before."""
    kept = {b: [m for m in ms if m.run_id in run_ids] for b, ms in found.machines.items()}
    return Found(kept, found.skipped, found.not_configured)


def unsearched_error(found: Found) -> BenchError | None:
    """What to end with when a backend could not be searched: machines there may still be
    billing, so the kill switch must not end as if it had stopped everything."""
    if not found.skipped:
        return None
    first = next(iter(found.skipped.values()))
    return type(first)(
        f"could not search {', '.join(found.skipped)}: {first}; machines there may still be "
        "running: run `bench stop-all` again, or look in the cloud console"
    )


@dataclass
class Stopped:
    machines: dict[str, list[Machine]] = field(default_factory=dict)  # backend -> now gone
    failed: dict[str, tuple[Machine, str]] = field(default_factory=dict)  # name -> (m, why)

    @property
    def count(self) -> int:
        return sum(len(m) for m in self.machines.values())


def stop_machines(ctx: Context, found: Found) -> Stopped:
    """Stop everything found; the machines a backend could not stop land in `failed`."""
    stopped = Stopped()
    for name, machines in found.machines.items():
        if not machines:
            continue
        backend = ctx.backend(name)
        gone = backend.stop(machines)
        stopped.machines[name] = gone
        reasons = backend.stop_failures
        gone_names = {m.name for m in gone}
        for machine in machines:
            if machine.name not in gone_names:
                why = reasons.get(machine.name, "still there after the delete")
                stopped.failed[machine.name] = (machine, why)
        for machine in gone:
            if ctx.registry.find(machine.run_id):
                ctx.registry.update(machine.run_id, state="stopped")
    return stopped


def failed_error(stopped: Stopped) -> CloudError | None:
    """Exit 4 naming every machine left running: the kill switch must not look done."""
    if not stopped.failed:
        return None
    names = ", ".join(f"{m.name} ({m.location})" for m, _ in stopped.failed.values())
    return CloudError(
        f"could not delete {len(stopped.failed)} machine(s): {names}; they may still bill: "
        "run `bench stop-all` again, or delete them in the cloud console"
    )
