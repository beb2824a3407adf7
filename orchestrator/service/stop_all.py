"""stop-all: the kill switch. Finds every bench machine on every backend, stops them all."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.backends.base import Machine
from orchestrator.errors import BenchError
from orchestrator.service.context import Context


@dataclass
class Found:
    machines: dict[str, list[Machine]] = field(default_factory=dict)  # backend -> machines
    skipped: dict[str, BenchError] = field(default_factory=dict)  # backend -> why not searched

    @property
    def count(self) -> int:
        return sum(len(m) for m in self.machines.values())

    @property
    def hourly_spend(self) -> float:
        return sum(m.rate_usd_per_hour for ms in self.machines.values() for m in ms)


def backends_to_search(ctx: Context) -> list[str]:
    """local always; gce whenever a project is configured (no local state needed)."""
    return ["local", "gce"] if ctx.config.project else ["local"]


def find_machines(ctx: Context) -> Found:
    found = Found()
    for name in backends_to_search(ctx):
        try:
            found.machines[name] = ctx.backend(name).list_machines()
        except BenchError as e:
            found.skipped[name] = e
    return found


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


def stop_machines(ctx: Context, found: Found) -> dict[str, list[Machine]]:
    stopped = {}
    for name, machines in found.machines.items():
        if machines:
            stopped[name] = ctx.backend(name).stop(machines)
            for machine in stopped[name]:
                if ctx.registry.find(machine.run_id):
                    ctx.registry.update(machine.run_id, state="stopped")
    return stopped
