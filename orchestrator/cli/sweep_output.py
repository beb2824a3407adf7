"""What `bench launch --gpu ...` prints: the split, then each member's launch or failure."""

from __future__ import annotations

from orchestrator.text import format_duration, markup_safe


def launch_and_print_sweep(
    ctx, out, request, gpus: str, backend: str, reason: str, wait: bool, on_started=None
):
    """Launch one run per GPU type and say how it went; `on_started(sweep)` is called once
    the members started (launch --json prints them), before any is followed."""
    from orchestrator.cli.launch_output import print_launch
    from orchestrator.gpus import parse_gpu_list
    from orchestrator.service.sweep import launch_sweep

    def announce(members) -> None:
        out.print(f"bench: backend [bold]{backend}[/]: {reason}")
        for m in members:
            rate = f"${m.rate.total:.4f}/h" if m.rate else "free"
            out.print(
                f"bench: {m.key}: share ${m.share_usd:.3f} of ${request.budget_usd:.2f} · "
                f"rate {rate} · estimated {format_duration(m.estimate.total_seconds)} "
                f"(≈ ${m.estimated_usd:.3f})"
            )

    sweep = launch_sweep(ctx, request, parse_gpu_list(gpus), backend, reason, announce)
    if on_started is not None:
        on_started(sweep)
    for outcome in sweep.launched:
        out.print(f"[bold]bench: {outcome.member.key}:[/]")
        print_launch(out, outcome.result)
    for outcome in sweep.failed:
        out.print(
            f"[bold red]bench: {outcome.member.key} did not start:[/] "
            f"{markup_safe(str(outcome.error))}"
        )
    started = ", ".join(o.member.key for o in sweep.launched) or "none"
    out.print(
        f"bench: sweep [bold]{sweep.sweep_id}[/]: {len(sweep.launched)} of "
        f"{len(sweep.outcomes)} GPU types running ({started}); "
        f"follow it with: bench status {sweep.sweep_id}"
    )
    code = max((o.error.exit_code for o in sweep.failed), default=0)
    if wait and sweep.launched:
        from orchestrator.cli.launch_output import how_it_ends, say_runs_go_on
        from orchestrator.cli.progress import follow

        unfollowed = list(sweep.launched)
        try:
            while unfollowed:
                outcome = unfollowed[0]
                record = ctx.registry.get(outcome.result.spec.run_id)
                code = max(code, follow(outcome.member.ctx, record, out))
                unfollowed.pop(0)
        except KeyboardInterrupt:
            runs = "; ".join(
                f"{o.result.spec.run_id} ({how_it_ends(o.result)})" for o in unfollowed
            )
            say_runs_go_on(f"the sweep's runs go on: {runs}", sweep.sweep_id)
            raise
    return code


def show_sweep_report(out, report) -> None:
    """One row per GPU, narrow enough for 80 columns; notes (why a candidate did not run)
    below the table. Every text that came from a run is escaped."""
    from rich import box
    from rich.table import Table

    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title=f"sweep {markup_safe(report.sweep_id)}",
    )
    table.add_column("gpu", no_wrap=True)
    table.add_column("run", no_wrap=True)
    table.add_column("state")
    table.add_column("speedup [CI]", no_wrap=True)
    table.add_column("TFLOP/s", justify="right", no_wrap=True)
    table.add_column("% peak", justify="right", no_wrap=True)
    for g in report.gpus:
        speedup = (
            f"{g.speedup.geomean:.2f}x [{g.speedup.low:.2f}, {g.speedup.high:.2f}]"
            if g.speedup
            else "-"
        )
        table.add_row(
            markup_safe(g.gpu),
            markup_safe(g.run_id),
            markup_safe(g.state),
            speedup,
            f"{g.best_tflops:.1f}" if g.best_tflops is not None else "-",
            f"{g.pct_of_peak:.1f}" if g.pct_of_peak is not None else "-",
        )
    out.print(table)
    shown = next((g for g in report.gpus if g.speedup), None)
    if shown:
        out.print(
            f"speedup: {markup_safe(shown.candidate)} over {markup_safe(shown.speedup.baseline)}"
            ", geometric mean over configs;\n  \\[interval]: the run's own, of that "
            "geometric mean (comparison.json),\n  at 95%, or an A/B run's last look's level"
        )
    out.print("TFLOP/s: best 16-bit config; % peak: of that GPU's dense 16-bit peak")
    for g in report.gpus:
        for note in g.notes:
            out.print(f"{markup_safe(g.gpu)}: {markup_safe(note)}")
        if g.best_implementation:
            out.print(f"{markup_safe(g.gpu)}: best TFLOP/s by {markup_safe(g.best_implementation)}")
    show_sweep_rankings(out, report)
    if report.plot:
        out.print(f"plot: {markup_safe(str(report.plot))}")


def show_sweep_rankings(out, report) -> None:
    """Each GPU's own ranking of its candidates, then where the rankings disagree (their
    decisions, never one GPU's numbers against another's: docs/ranking.md)."""
    from orchestrator.cli.report_ranking import show_ranking
    from orchestrator.report.sweep_rankings import answer

    ranked = report.rankings()
    for gpu, ranking in ranked:
        out.print(f"\n[bold]On {markup_safe(gpu)}[/]:", soft_wrap=False)
        show_ranking(out, ranking)
    if len(ranked) < 2:
        return
    out.print()
    if not report.disagreements:
        agreed = "; ".join(answer(gpu, ranking) for gpu, ranking in ranked)
        out.print(
            f"[bold]Across GPU types[/]: the rankings agree ({markup_safe(agreed, 400)}); "
            "each GPU's numbers are its own",
            soft_wrap=False,
        )
        return
    out.print(
        "[bold]Across GPU types[/], where the rankings disagree (each GPU's numbers are its "
        "own, never compared):",
        soft_wrap=False,
    )
    for disagreement in report.disagreements:
        out.print(f"  {markup_safe(disagreement.text, 400)}", soft_wrap=False)


def sweep_report_json(report) -> str:
    """`bench report SWEEP --format json`: each GPU's ranking and where they disagree."""
    from results_schema.program_output import SweepGpuRanking, SweepReportOutput

    gpus = [
        SweepGpuRanking(
            gpu=g.gpu,
            run_id=g.run_id,
            state=g.state,
            ranking=g.ranking.model_dump(mode="json") if g.ranking else None,
        )
        for g in report.gpus
    ]
    output = SweepReportOutput(
        sweep_id=report.sweep_id, gpus=gpus, disagreements=report.disagreements
    )
    return output.model_dump_json()
