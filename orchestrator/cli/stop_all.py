from __future__ import annotations

import click

from orchestrator.cli.options import console, make_context, yes_option


@click.command(name="stop-all")
@yes_option()
@click.option("--dry-run", is_flag=True, help="list what would be stopped; stop nothing")
def stop_all(yes, dry_run):
    """The kill switch: stop every bench machine, wherever it runs.

    Finds every VM labelled bench-managed=true in every zone of the project
    (no local state needed) and every running local run, then deletes/stops
    them in parallel and reports the hourly spend stopped. If a backend cannot
    be searched (network, credentials), it still stops what it found and then
    fails with that backend's error: it never reports "nothing running" unseen.

    \b
    Examples:
      bench stop-all --dry-run
      bench stop-all --yes
    """
    from rich.table import Table

    from orchestrator.service.stop_all import find_machines, stop_machines, unsearched_error

    ctx = make_context()
    out = console()
    found = find_machines(ctx)
    unsearched = unsearched_error(found)
    if found.count == 0:
        if unsearched:
            raise unsearched
        out.print("bench: no bench machines are running")
        return 0
    table = Table("backend", "run", "machine", "where", "state", "$/h")
    for backend, machines in found.machines.items():
        for m in machines:
            table.add_row(
                backend, m.run_id, m.name, m.location, m.state, f"{m.rate_usd_per_hour:.4f}"
            )
    out.print(table)
    if dry_run:
        out.print(
            f"bench: dry run: would stop {found.count} machines (${found.hourly_spend:.4f}/h)"
        )
        if unsearched:
            raise unsearched
        return 0
    if not yes:
        click.confirm(f"Stop these {found.count} machines?", abort=True)
    stopped = stop_machines(ctx, found)
    count = sum(len(m) for m in stopped.values())
    out.print(f"bench: stopped {count} machines; hourly spend stopped: ${found.hourly_spend:.4f}/h")
    if unsearched:
        raise unsearched
    return 0
