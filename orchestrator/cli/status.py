from __future__ import annotations

import click

from orchestrator.cli.options import console, make_context


@click.command()
@click.argument("run_id", required=False)
def status(run_id):
    """Show runs: backend, phase and progress, elapsed time, cost so far, budget, state.

    \b
    Examples:
      bench status                      # every run in the registry
      bench status 20261122-081500-a1b2c3
    """
    from rich import box
    from rich.table import Table

    from orchestrator.budget import format_duration
    from orchestrator.service.runs import views

    ctx = make_context()
    rows = views(ctx, run_id)
    out = console()
    if not rows:
        out.print("no runs yet; start one with: bench launch --backend local --budget 1.00 --wait")
        return 0
    table = Table(
        "run",
        "backend",
        "phase",
        "elapsed",
        "cost/budget",
        "state",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    reasons = []
    for view in rows:
        record, heartbeat = view.record, view.status
        phase = heartbeat.phase if heartbeat else "-"
        if heartbeat and heartbeat.total:
            phase += f" {heartbeat.done}/{heartbeat.total}"
        table.add_row(
            record.run_id,
            record.backend,
            phase,
            format_duration(view.elapsed_seconds),
            f"${view.cost_usd:.2f}/{record.budget_usd:.2f}",
            view.state,
        )
        if view.manifest and view.manifest.reason:
            reasons.append(f"{record.run_id}: {view.manifest.reason}")
        if record.backend == "gce" and view.machine == "TERMINATED":
            # Powered off by its own script: no VM charge, but the disk bills until deleted.
            reasons.append(
                f"{record.run_id}: VM powered off, its disk still bills; "
                f"`bench fetch {record.run_id}` deletes it"
            )
    table.columns[0].no_wrap = True  # a run id must stay copyable
    out.print(table)
    for reason in reasons:
        out.print(reason)
    return 0
