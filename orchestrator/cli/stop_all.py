from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, console, make_context, yes_option


@click.command(name="stop-all")
@cloud_options
@yes_option()
@click.option("--dry-run", is_flag=True, help="list what would be stopped; stop nothing")
@click.argument("target", required=False, metavar="[RUN|SWEEP]")
def stop_all(yes, dry_run, target):
    """The kill switch: stop every bench machine, wherever it runs.

    Finds every VM labelled bench-managed=true in every zone of the project
    (no local state needed), running or powered off, and every running local
    run, then deletes/stops them in parallel and reports the hourly spend
    stopped. Says which backends it did not search and why (GCE without a
    project). If a backend cannot be searched (network, credentials), it still
    stops what it found and then fails with that backend's error: it never
    reports "nothing running" unseen. Exit 4 naming every VM it could not
    delete. With a run or sweep id, only that run's (or that sweep's) machines.

    \b
    Examples:
      bench stop-all --dry-run
      bench stop-all --yes
      bench stop-all sweep-20261122-081500-d4e5f6 --yes
    """
    from rich.table import Table

    from orchestrator.service.stop_all import (
        failed_error,
        find_machines,
        only_runs,
        stop_machines,
        unsearched_error,
    )

    ctx = make_context()
    out = console()
    found = find_machines(ctx)
    if target:
        from orchestrator.service.runs import records_for

        found = only_runs(found, {r.run_id for r in records_for(ctx, target)})
    for backend, why in found.not_configured.items():
        out.print(f"bench: {backend} was not searched: {why}")
    unsearched = unsearched_error(found)
    if found.count == 0:
        if unsearched:
            raise unsearched
        out.print(f"bench: no bench machines are running ({', '.join(found.machines)} searched)")
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
    if not yes and not click.confirm(f"Stop these {found.count} machines?"):
        out.print("bench: nothing stopped")
        return 0
    stopped = stop_machines(ctx, found)
    saved = sum(m.rate_usd_per_hour for ms in stopped.machines.values() for m in ms)
    out.print(f"bench: stopped {stopped.count} machines; hourly spend stopped: ${saved:.4f}/h")
    for machine, why in stopped.failed.values():
        out.print(f"bench: could not delete {machine.name} in {machine.location}: {why}")
    failed = failed_error(stopped)
    if unsearched:
        raise unsearched
    if failed:
        raise failed
    return 0
