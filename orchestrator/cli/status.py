from __future__ import annotations

import click

from orchestrator.cli.options import console, make_context


@click.command()
@click.argument("run_id", required=False)
def status(run_id):
    """Show runs: backend, phase, progress, elapsed time, budget and state.

    \b
    Examples:
      bench status                      # every run in the registry
      bench status 20261122-081500-a1b2c3
    """
    from rich.table import Table

    from orchestrator.budget import format_duration
    from orchestrator.service.runs import views

    ctx = make_context()
    rows = views(ctx, run_id)
    out = console()
    if not rows:
        out.print("no runs yet; start one with: bench launch --backend local --budget 1.00 --wait")
        return 0
    table = Table("run", "backend", "plan", "phase", "progress", "elapsed", "budget", "state")
    reasons = []
    for view in rows:
        record, heartbeat = view.record, view.status
        phase = heartbeat.phase if heartbeat else "-"
        progress = f"{heartbeat.done}/{heartbeat.total}" if heartbeat and heartbeat.total else "-"
        table.add_row(
            record.run_id,
            record.backend,
            record.plan,
            phase,
            progress,
            format_duration(view.elapsed_seconds),
            f"${record.budget_usd:.2f}",
            view.state,
        )
        if view.manifest and view.manifest.reason:
            reasons.append(f"{record.run_id}: {view.manifest.reason}")
    for column in table.columns:
        column.overflow = "fold"
    out.print(table)
    for reason in reasons:
        out.print(reason)
    return 0
