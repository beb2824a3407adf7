from __future__ import annotations

import click

from orchestrator.cli.options import console, dest_option


@click.command()
@click.argument("run_id", metavar="RUN|SWEEP")
@click.option("--compare", "compare_id", default=None, help="another fetched run to compare with")
@dest_option("where fetched runs live")
def report(run_id, compare_id, dest):
    """Tables and PNG plots of a fetched run, optionally against another run.

    Plots (latency distributions, speedup with its 95% interval, TFLOP/s
    against sequence length) are written to DEST/<run id>/report/.

    A sweep id (`launch --gpu a,b`) compares its GPU types instead: per GPU
    the candidate's speedup with its interval and the best TFLOP/s as a share
    of that GPU's peak; the plot goes to DEST/<sweep id>/report/gpus.png.

    \b
    Examples:
      bench fetch 20261122-081500-a1b2c3 && bench report 20261122-081500-a1b2c3
      bench report RUN_A --compare RUN_B
      bench fetch sweep-20261122-081500-d4e5f6 && bench report sweep-20261122-081500-d4e5f6
    """
    from orchestrator.errors import NotFoundError, UsageError
    from orchestrator.report import make_report
    from orchestrator.spec import is_sweep_id

    if is_sweep_id(run_id):
        if compare_id:
            raise UsageError("--compare takes two runs, not a sweep")
        from orchestrator.cli.options import make_context
        from orchestrator.cli.sweep_output import show_sweep_report
        from orchestrator.service.runs import records_for
        from orchestrator.sweep_report import make_sweep_report

        members = records_for(make_context(), run_id)
        show_sweep_report(console(), make_sweep_report(run_id, members, dest))
        return 0

    run_dir = dest / run_id
    compare_dir = dest / compare_id if compare_id else None
    for directory in filter(None, (run_dir, compare_dir)):
        if not (directory / "manifest.json").is_file():
            raise NotFoundError(
                f"{directory} holds no fetched run; run `bench fetch {directory.name}` first"
            )
    show_report(console(), make_report(run_dir, compare_dir))
    return 0


def show_report(out, report) -> None:
    from rich.table import Table

    from orchestrator.boundary import markup_safe

    table = Table(
        "config",
        "implementation",
        "mode",
        "median ms",
        "TFLOP/s",
        "% peak",
        "speedup [95% CI] over",
        title=f"run {markup_safe(report.run_id)} ({report.status})",
    )
    for row in report.rows:
        speedup = "(candidate)"
        if row.speedup is not None and row.speedup_ci:
            low, high = row.speedup_ci
            speedup = (
                f"{row.speedup:.3f}x [{low:.3f}, {high:.3f}]"
                f" over {markup_safe(row.versus or 'candidate')}"
                f" {markup_safe(row.verdict or row.flag or '')}"
            )
        elif row.flag:
            speedup = markup_safe(row.flag)
        peak = f"{row.pct_of_peak:.1f}" if row.pct_of_peak is not None else "-"
        table.add_row(
            markup_safe(row.config),
            markup_safe(row.implementation),
            row.mode,
            f"{row.median_ms:.4f}",
            f"{row.tflops:.1f}",
            peak,
            speedup,
        )
    out.print(table)
    if report.statistics:
        out.print(f"intervals: {markup_safe(report.statistics.description)}")
    if report.control:
        counts = ", ".join(f"{n} {v}" for v, n in sorted(report.control_verdicts().items()))
        out.print(
            f"A/A control {markup_safe(report.control)}"
            " (the same implementation under a second name): "
            f"{counts or 'no verdicts'}; the noise floor of this run"
        )
    for plot in report.plots:
        out.print(f"plot: {markup_safe(plot)}")
    if report.compared_with is None:
        return
    if not report.disagreements:
        out.print(
            f"against {markup_safe(report.compared_with)}: every interval overlaps; no config moved"
        )
    for d in report.disagreements:
        out.print(
            f"[yellow]moved[/] {markup_safe(d.config)} {markup_safe(d.implementation)} "
            f"{d.quantity}: [{d.this[0]:.4g}, {d.this[1]:.4g}] vs "
            f"[{d.other[0]:.4g}, {d.other[1]:.4g}] "
            f"({100 * d.relative_difference:+.1f}%)"
        )
