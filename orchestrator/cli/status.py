from __future__ import annotations

import click

from orchestrator.cli.options import console, make_context


@click.command()
@click.argument("run_id", required=False, metavar="[RUN|SWEEP]")
def status(run_id):
    """Show runs: backend, phase and progress, elapsed time, cost so far, budget, state.

    A sweep id (from `launch --gpu a,b`) shows each of its runs; a run of a
    sweep shows its GPU type next to its backend (gce:t4).

    With a project configured it also lists every powered-off bench VM in the
    project: no VM charge, but its disk bills until it is deleted. Each line
    gives its $/h and the one command that removes it.

    \b
    Examples:
      bench status                      # every run in the registry
      bench status 20261122-081500-a1b2c3
      bench status sweep-20261122-081500-d4e5f6
    """
    from rich import box
    from rich.table import Table

    from orchestrator.boundary import markup_safe
    from orchestrator.budget import format_duration
    from orchestrator.errors import BenchError, ResultsError
    from orchestrator.service.runs import leftovers, views

    ctx = make_context()
    rows = views(ctx, run_id)
    out = console()
    try:
        left = leftovers(ctx, rows)
    except BenchError as e:  # the runs above still deserve a table
        left = []
        note = f"bench: could not list powered-off VMs that may still bill: {e}"
    else:
        note = ""
    if not rows and not left:
        out.print("no runs yet; start one with: bench launch --backend local --budget 1.00 --wait")
        return 0
    # At 80 columns (a pipe, CI) phase+progress and state wrap at their space; nothing is cut.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("run", no_wrap=True)  # a run id must stay copyable
    table.add_column("backend", no_wrap=True)
    table.add_column("phase", min_width=len("environment"))
    table.add_column("elapsed", no_wrap=True)
    table.add_column("cost/budget", no_wrap=True)
    table.add_column("state", min_width=len("preempted"))
    reasons = []
    for view in rows:
        record = view.record
        table.add_row(
            record.run_id,
            f"{record.backend}:{record.gpu}" if record.gpu else record.backend,
            _phase_and_progress(view),
            format_duration(view.elapsed_seconds),
            f"${view.cost_usd:.2f}/{record.budget_usd:.2f}",
            view.state,
        )
        if view.manifest and view.manifest.reason:
            reasons.append(f"{record.run_id}: {markup_safe(view.manifest.reason)}")
        elif view.console_reason:
            reasons.append(
                f"{record.run_id}: {markup_safe(view.console_reason)} "
                "(from the VM's serial output: "
                "no manifest reached the bucket)"
            )
    if rows:
        out.print(table)
    for reason in reasons:
        out.print(reason)
    if note:
        out.print(note, markup=False, highlight=False)
    for leftover in left:
        m = leftover.machine
        out.print(
            f"leftover: {m.name} in {m.location} is powered off; its disk bills "
            f"${m.rate_usd_per_hour:.4f}/h until deleted: {leftover.remove_with}",
            markup=False,
            highlight=False,
        )
    # Every run is listed first; a run whose files were refused then fails the command.
    problems = [view.problem for view in rows if view.problem]
    if problems:
        raise ResultsError("; ".join(problems))
    return 0


def _phase_and_progress(view) -> str:
    """The live heartbeat's done/total; once a run ended, the samples its manifest holds (a
    partial run's last heartbeat says finish 0/0, which would hide how far it got)."""
    heartbeat, manifest = view.status, view.manifest
    phase = heartbeat.phase if heartbeat else "-"
    if heartbeat and heartbeat.total:
        return f"{phase} {heartbeat.done}/{heartbeat.total}"
    measured = manifest.file("results/measurements.csv") if manifest else None
    if measured is not None and measured.rows is not None and manifest.plan is not None:
        planned = manifest.plan.samples_per_implementation() * len(manifest.plan.identities)
        return f"{phase} {measured.rows}/{planned}"
    return phase
