from __future__ import annotations

import click

from orchestrator.cli.gate import gate_options
from orchestrator.cli.options import console, dest_option


@click.command()
@click.argument("run_id", metavar="RUN|SWEEP|PATH")
@click.option("--compare", "compare_id", default=None, help="another fetched run to compare with")
@dest_option("where fetched runs live")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "markdown", "json"]),
    default="text",
    show_default=True,
    help="markdown or json: the A/B gate's report (schema results_schema/jsonschema/"
    "gate-report.schema.json) on stdout, for a CI log or a pull-request comment; no plots",
)
@gate_options
def report(run_id, compare_id, dest, output_format, fail_on, margin, gate_on):
    """Tables and PNG plots of a fetched run, optionally against another run.

    Plots (latency distributions, speedup with its 95% interval, TFLOP/s
    against sequence length) are written to DEST/<run id>/report/. A run
    of several candidates (a kernel's variants) leads with their ranking:
    each one's speedup over the baseline with simultaneous intervals, and
    the best only where it is shown faster than the runner-up, else the
    tie (docs/ranking.md). A run launched with --baseline leads with its
    A/B comparison (speedup per config and geometric mean, each with
    interval and verdict); one launched with --profile ends with Nsight
    Compute's counters (the .ncu-rep files lie in DEST/<run id>/results/,
    for `ncu --import` or Nsight Compute).

    RUN is a run id (the report reads DEST/<run id>/) or the path of a run
    folder `bench fetch` wrote; nothing else is read or written. A fetch of
    the same run may run meanwhile: the report reads one whole copy of it.
    A run with many configs is plotted in part, its first ones (the note
    below the table says how many; the table lists every row).

    --format markdown (or json) prints the gate's view of an A/B run: the
    geometric mean first, the A/A control's line, then per config baseline,
    candidate, speedup with interval and verdict at --margin; slower configs
    first, at most 100 configs (the rest counted), so it fits a pull-request
    comment (65,536 characters). --fail-on slower exits with the gate's code
    (6 regression, 7 inconclusive, 8 candidate incorrect), as `launch` does.

    A sweep id (`launch --gpu a,b`) compares its GPU types instead: per GPU
    the candidate's speedup with its interval and the best TFLOP/s as a share
    of that GPU's peak; the plot goes to DEST/<sweep id>/report/gpus.png.
    With variants, each GPU's own ranking follows, then where the rankings
    disagree (another best, a tie, a pair in the other order); --format json
    prints them for programs (sweep-report.schema.json).

    \b
    Examples:
      bench fetch 20261122-081500-a1b2c3 && bench report 20261122-081500-a1b2c3
      bench report RUN_A --compare RUN_B
      bench report RUN --format markdown >> "$GITHUB_STEP_SUMMARY"
      bench report RUN --format json --margin 3% --gate-on any
      bench fetch sweep-20261122-081500-d4e5f6
      bench report sweep-20261122-081500-d4e5f6
    """
    from orchestrator.errors import UsageError
    from orchestrator.report import make_report, published_run_dir
    from orchestrator.spec import is_sweep_id

    if is_sweep_id(run_id):
        if compare_id:
            raise UsageError("--compare takes two runs, not a sweep")
        if output_format == "markdown" or fail_on:
            raise UsageError("a sweep's report is text or --format json; gate each run instead")
        from orchestrator.cli.options import make_context
        from orchestrator.cli.sweep_output import show_sweep_report, sweep_report_json
        from orchestrator.report.sweep import make_sweep_report
        from orchestrator.service.runs import records_for

        members = records_for(make_context(), run_id)
        sweep = make_sweep_report(run_id, members, dest)
        if output_format == "json":
            click.echo(sweep_report_json(sweep))
        else:
            show_sweep_report(console(), sweep)
        return 0

    run_dir = published_run_dir(dest, run_id)
    if output_format != "text" or fail_on:
        if compare_id:
            raise UsageError("--compare makes a text report: leave out --format and --fail-on")
        return show_gate(console(), run_dir, output_format, margin, gate_on, fail_on)
    compare_dir = published_run_dir(dest, compare_id) if compare_id else None
    show_report(console(), make_report(run_dir, compare_dir, margin=margin))
    return 0


def show_gate(out, run_dir, output_format, margin, gate_on, fail_on) -> int:
    """The gate's report of one run on stdout; its exit code with --fail-on, else 0."""
    from orchestrator.cli.gate import show_outcome
    from orchestrator.cli.gate_markdown import render_json, render_markdown
    from orchestrator.service.gate import GateOptions, judge_run_dir

    judged = judge_run_dir(run_dir, GateOptions(margin=margin, gate_on=gate_on))
    if output_format == "markdown":
        click.echo(render_markdown(judged), nl=False)
    elif output_format == "json":
        click.echo(render_json(judged), nl=False)
    else:
        show_outcome(out, judged)
    return judged.exit_code if fail_on else 0


def show_report(out, report) -> None:
    from orchestrator.cli.report_ranking import show_ranking
    from orchestrator.cli.report_sections import noise_banner, show_comparison, show_profile
    from orchestrator.cli.report_table import legend, results_table
    from orchestrator.report.telemetry import telemetry_line
    from orchestrator.text import markup_safe

    banner = noise_banner(report.noise, report.margin)
    if banner:
        out.print(banner, soft_wrap=False)
    if report.ranking is not None and report.ranking.leads_report():
        show_ranking(out, report.ranking)
    for line in report.build_failures:
        out.print(markup_safe(line), soft_wrap=False)
    for line in report.check_failures:
        out.print(markup_safe(line, 400), soft_wrap=False)
    if report.ab is not None:
        show_comparison(out, report.ab, report.margin, report.confidence)
    out.print(results_table(report))
    for line in legend(report):
        out.print(markup_safe(line), soft_wrap=False)
    if report.statistics:
        out.print(f"intervals: {markup_safe(report.statistics.description)}", soft_wrap=False)
    if report.control:
        counts = ", ".join(f"{n} {v}" for v, n in sorted(report.control_verdicts().items()))
        out.print(
            f"A/A control {markup_safe(report.control)}"
            " (the same implementation under a second name): "
            f"{counts or 'no verdicts'}; the noise floor of this run",
            soft_wrap=False,
        )
    gpu = telemetry_line(report.telemetry, report.environment)
    if gpu:
        out.print(markup_safe(gpu), soft_wrap=False)
    if report.profile:
        show_profile(out, report.profile)
    for plot in report.plots:
        out.print(f"plot: {markup_safe(plot)}")
    if report.plot_note:
        out.print(markup_safe(report.plot_note))
    if report.compared_with is None:
        return
    if report.compare_warning:
        out.print(f"[yellow]warning:[/] {markup_safe(report.compare_warning)}")
    if not report.disagreements:
        out.print(
            f"against {markup_safe(report.compared_with)}: every interval overlaps; no config moved"
        )
    for d in report.disagreements:
        out.print(
            f"[yellow]moved[/] {markup_safe(d.config)} {markup_safe(d.implementation)} "
            f"{d.quantity}: \\[{d.this[0]:.4g}, {d.this[1]:.4g}] (this run) vs "
            f"\\[{d.other[0]:.4g}, {d.other[1]:.4g}] ({markup_safe(report.compared_with)}) "
            f"({100 * d.relative_difference:+.1f}%)"
        )
