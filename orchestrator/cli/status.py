from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, console, make_context


@click.command()
@cloud_options
@click.argument("run_id", required=False, metavar="[RUN|SWEEP]")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout, for scripts")
def status(run_id, as_json):
    """Show runs: backend, phase and progress, elapsed time, cost so far, budget, state.

    A sweep id (from `launch --gpu a,b`) shows each of its runs; a run of a
    sweep shows its GPU type next to its backend (gce:t4). A run whose cloud
    still holds it for lack of capacity (a Batch job QUEUED or SCHEDULED) is
    "waiting for capacity", at no cost yet; a finished run's cost is what
    `bench fetch` reckoned (on Batch: every attempt of its task).

    With a project configured it also lists every powered-off bench VM in the
    project: no VM charge, but its disk bills until it is deleted. Each line
    gives its $/h and the one command that removes it.

    \b
    Examples:
      bench status                      # every run in the registry
      bench status 20261122-081500-a1b2c3
      bench status sweep-20261122-081500-d4e5f6
      bench status --json | jq '.runs[].state'
    """
    from rich import box
    from rich.table import Table

    from orchestrator.cli.report_sections import NOISY_REMEDY
    from orchestrator.errors import BenchError, ResultsError
    from orchestrator.service.runs import leftovers, listing
    from orchestrator.text import format_duration, markup_safe, printable

    ctx = make_context()
    listed = listing(ctx, run_id)
    rows = listed.views
    out = console()
    try:
        left = leftovers(ctx, rows)
    except BenchError as e:  # the runs above still deserve a table
        left = []
        note = f"bench: could not list powered-off VMs that may still bill: {e}"
    else:
        note = ""
    if as_json:
        return _print_json(rows, left, note, listed.unreadable)
    if not rows and not left and not listed.unreadable:
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
            f"{record.backend}:{record.gpu}" if record.gpu and record.sweep_id else record.backend,
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
        elif view.state == "deleted by bench clean":
            reasons.append(
                f"{record.run_id}: deleted by bench clean ({record.cleaned_at[:16]} UTC) before "
                "anyone fetched it: its results are gone"
            )
        reasons += [f"{record.run_id}: {markup_safe(line)}" for line in view.build_failures]
        noise = view.manifest.noise if view.manifest else None
        if noise is not None and noise.verdict == "noisy":
            reasons.append(
                f"{record.run_id}: noisy: verdicts not reliable ({markup_safe(noise.reason, 200)});"
                f" {NOISY_REMEDY}"
            )
        sampling = view.manifest.sampling if view.manifest else None
        if sampling is not None and sampling.stopped != "nothing-to-decide":
            reasons.append(
                f"{record.run_id}: sampling stopped: {markup_safe(sampling.reason, 300)}"
            )
        overall = view.ab_overall
        if overall is not None:
            margin = view.manifest.plan.margin
            reasons.append(
                f"{record.run_id}: A/B geometric mean {overall.geomean:.3g}x "
                f"\\[{overall.ci_low:.3g}, {overall.ci_high:.3g}]: {overall.verdict} at "
                f"±{margin * 100:g}%"
            )
    if rows:
        out.print(table)
    for reason in reasons:
        out.print(reason)
    for line in filter(None, (listed.unreadable, note)):
        out.print(printable(line), markup=False, highlight=False)
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


def _print_json(rows, left, note, unreadable) -> int:
    """JSON escapes every control and non-ASCII character, so what a run wrote stays inert."""
    import json

    from orchestrator.errors import ResultsError

    document = {
        "runs": [view.as_dict() for view in rows],
        "leftovers": [
            {
                "name": item.machine.name,
                "location": item.machine.location,
                "rate_usd_per_hour": item.machine.rate_usd_per_hour,
                "remove_with": item.remove_with,
            }
            for item in left
        ],
        "note": note or None,
        "unreadable": unreadable or None,
    }
    click.echo(json.dumps(document, indent=2, ensure_ascii=True))
    problems = [view.problem for view in rows if view.problem]
    if problems:
        raise ResultsError("; ".join(problems))
    return 0


def _phase_and_progress(view) -> str:
    phase, done, total = view.progress
    return f"{phase} {done}/{total}" if total else phase
