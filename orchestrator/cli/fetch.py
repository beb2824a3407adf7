from __future__ import annotations

import click

from orchestrator.cli.options import (
    cloud_options,
    console,
    dest_option,
    json_option,
    make_context,
)


@click.command()
@cloud_options
@click.argument("run_id", required=False, metavar="[RUN|SWEEP]")
@click.option("--all", "fetch_all", is_flag=True, help="every finished run not fetched yet")
@dest_option("where results/<run id>/ goes")
@json_option("each fetched run's per-implementation results and ranking")
def fetch(run_id, fetch_all, dest, as_json):
    """Download a finished run, verify every sha256, validate every row.

    Writes DEST/<run id>/ (manifest.json, results/*.csv, logs/) and deletes
    the run's finished machine. A corrupt or invalid file exits 5 and leaves
    any earlier good copy untouched. Idempotent. A sweep id fetches each of
    its runs that started (one that cannot be fetched does not stop the
    others).

    \b
    Examples:
      bench fetch                       # the latest run
      bench fetch 20261122-081500-a1b2c3 --dest ~/results
      bench fetch --all
      bench fetch sweep-20261122-081500-d4e5f6
      bench fetch 20261122-081500-a1b2c3 --json   # for programs
    """
    from orchestrator.errors import ResultsError, UsageError
    from orchestrator.service.fetch import fetch_runs

    if run_id and fetch_all:
        raise UsageError("give a RUN_ID or --all, not both")
    out, fetched = console(stderr=as_json), []

    def on_fetched(result) -> None:
        fetched.append(result)
        show_summary(out, result)

    outcome = fetch_runs(make_context(), run_id, fetch_all, dest, on_fetched=on_fetched)
    if fetch_all and outcome.attempted == 0:
        out.print("bench: nothing to fetch: every run in the registry is fetched already")
    if as_json:
        from orchestrator.cli.json_output import fetched_run, print_json
        from results_schema.program_output import FetchOutput

        runs = [fetched_run(result) for result in fetched]
        print_json(FetchOutput(runs=runs, incomplete=outcome.incomplete))
    if outcome.incomplete:
        raise ResultsError("; ".join(outcome.incomplete))
    return 0


def show_summary(out, result) -> None:
    """Per config, one line per implementation: its median, and the candidate's speedup over
    it, or why it has none (its failed check's reason, a kernel unavailable here). Long
    rather than wide, so that at 80 columns (a pipe, CI) no config name is cut."""
    from rich import box
    from rich.table import Table

    from orchestrator.text import markup_safe
    from results_schema.models import first_failures
    from results_schema.sampling import level

    manifest = result.manifest
    samples = next((f.rows for f in manifest.files if f.path.endswith("measurements.csv")), 0)
    out.print(
        f"bench: run [bold]{result.run_id}[/] {manifest.status} → {markup_safe(result.directory)} "
        f"({samples} samples, every sha256 verified)"
    )
    show_cache(out, result)
    if not result.summary or manifest.plan is None:
        return
    plan = manifest.plan
    from orchestrator.cli.report_sections import noise_banner

    banner = noise_banner(manifest.noise, plan.margin)
    if banner:
        out.print(banner, soft_wrap=False)
    # Every verdict by the one rule at the run's margin, as report and gate show it.
    by_key = {
        (row.config, row.implementation): row.judged_at(plan.margin) for row in result.summary
    }
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("config", no_wrap=True)
    table.add_column("impl", no_wrap=True)
    table.add_column("median ms", justify="right", no_wrap=True)
    confidence = manifest.statistics.confidence if manifest.statistics else None
    table.add_column(f"{markup_safe(plan.candidate)} speedup [{level(confidence)} CI]")
    failed = first_failures(result.checks)
    cells = []
    for config in plan.configs:
        for index, name in enumerate(plan.identities):
            row = by_key.get((config.name, name))
            check = failed.get((config.name, name))
            # A failed check says so where its speedup (or '-') would be; why, below.
            cell = check.failure() if check else _speedup_cell(plan, name, row)
            cells.append(cell)
            table.add_row(
                markup_safe(config.name) if index == 0 else "",
                markup_safe(name),
                f"{row.median_ms:.4f}" if row else "-",
                markup_safe(cell),
            )
    out.print(table)
    _show_failures(out, manifest, failed)
    candidate = markup_safe(plan.candidate)
    out.print(
        f"speedup: how many times as fast {candidate} (cand.) ran as the row's "
        f"implementation, the median of per-round ratios row ms / {candidate} ms; "
        f"below 1, {candidate} is the slower"
    )
    margin = f"{plan.margin * 100:g}%"
    out.print(
        f"verdicts at the run's ±{margin} margin: cand. slower, all of the interval below "
        f"1 - {margin}; cand. not slower (or equivalent, cand. faster): its low end at or above "
        "it; else undecided"
    )
    from orchestrator.cli.report_table import flag_legend

    flags = [row.flag for row in by_key.values() if row.flag]
    no_verdict = any(cell.endswith(" no verdict") for cell in cells)
    for line in flag_legend(flags, no_verdict):
        out.print(markup_safe(line), soft_wrap=False)
    _show_ab(out, manifest)
    if plan.control:
        out.print(
            f"{markup_safe(plan.control_identity)}: A/A control, "
            f"{markup_safe(plan.control)} against itself"
        )


def _show_failures(out, manifest, failed) -> None:
    """Why rows have no timing (or a flag): each failed build in one line, then each other
    failed (config, identity) with its first failed check's reason."""
    from orchestrator.text import markup_safe
    from results_schema.kernel_contract import build_failure_lines, failed_builds

    lines = build_failure_lines(manifest.user_builds, manifest.plan.identities)
    built = failed_builds(manifest.user_builds)
    lines += [c.failure_line() for c in failed.values() if c.implementation not in built]
    for line in lines:
        out.print(markup_safe(line, 400), soft_wrap=False)


def _show_ab(out, manifest) -> None:
    """An A/B run's geometric mean over configs, judged as the gate judges it."""
    from orchestrator.text import markup_safe

    plan = manifest.plan
    if plan.comparison is None:
        return
    line = manifest.ab_overall()
    if line is None:
        out.print("A/B: no config compared, so no geometric mean")
        return
    out.print(
        f"A/B: {markup_safe(plan.candidate)} over {markup_safe(line.identity)}: geometric mean "
        f"{line.geomean:.3g}x \\[{line.ci_low:.3g}, {line.ci_high:.3g}] [bold]{line.verdict}[/] "
        f"({line.configs} configs)",
        soft_wrap=False,
    )


def show_cache(out, result) -> None:
    """One line per candidate entry of the run's build cache: promoted, or refused and why."""
    from orchestrator.text import markup_safe

    for decision in result.cache:
        out.print(f"bench: {markup_safe(decision.line())}")


def _speedup_cell(plan, implementation: str, row) -> str:
    if implementation == plan.candidate:
        return f"(candidate, {row.flag})" if row is not None and row.flag else "(candidate)"
    if row is not None and row.flag:
        return row.flag
    if row is None or row.speedup is None:
        return "-"
    from orchestrator.report.labels import verdict_phrase

    # No verdict without a flag of its own: the row it is compared with was flagged.
    control = implementation == plan.control_identity
    verdict = verdict_phrase(row.verdict, control=control) if row.verdict else "no verdict"
    return f"{row.speedup:.2f}x [{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}] {verdict}"
