"""This user's powered-off bench VMs, deleted by their next launch.

A bench VM that stopped instead of being deleted (its run's watchdog powered it off, a host
event stopped it: GPUs cannot live-migrate, so on_host_maintenance is TERMINATE; or the
default account's VM, which may not delete itself) has no time cap left: Compute Engine
clears max_run_duration on a stopped VM, and its boot disk bills until it is deleted. Its
run's files are in the bucket by then, and a stopped VM serves no serial output, so nothing is
lost by deleting it. `fetch`, `--wait` and `stop-all` delete such VMs too; `status` lists
everyone's with the command that deletes each.
"""

from __future__ import annotations

from orchestrator.errors import BenchError
from orchestrator.service.context import Context
from orchestrator.users import owner_label


def delete_own_powered_off(ctx: Context, name: str) -> list[str]:
    """Delete every powered-off machine of backend `name` labelled with this user's
    bench-owner; one line for each, deleted or not (then with the command that deletes it),
    or one saying they could not be looked for. Never raises: a launch is not refused for the
    leftovers of earlier ones. Nothing for a backend that bills nothing."""
    if not ctx.capabilities(name).billed:
        return []
    owner, backend, lines = owner_label(ctx.config.owner), ctx.backend(name), []
    try:
        mine = [m for m in backend.powered_off() if m.owner == owner]
        gone = {m.name for m in backend.stop(mine)}
    except BenchError as e:
        return [f"could not look for powered-off bench VMs of yours: {e}"]
    for machine in mine:
        billed = f"its disk billed ${machine.rate_usd_per_hour:.4f}/h"
        if machine.name in gone:
            lines.append(
                f"deleted {machine.name} in {machine.location}, a powered-off bench VM of yours "
                f"(run {machine.run_id}): {billed} with no time cap left"
            )
        else:
            why = backend.stop_failures.get(machine.name, "not deleted")
            lines.append(
                f"{machine.name} in {machine.location}, a powered-off bench VM of yours, could "
                f"not be deleted ({why}): {billed}; {backend.delete_command(machine)}"
            )
    return lines
