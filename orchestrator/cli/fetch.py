from __future__ import annotations

import click

from orchestrator.cli.options import console, dest_option, make_context


@click.command()
@click.argument("run_id", required=False)
@click.option("--all", "fetch_all", is_flag=True, help="every finished run not fetched yet")
@dest_option("where results/<run id>/ goes")
def fetch(run_id, fetch_all, dest):
    """Download a finished run, verify every sha256, validate every row.

    Writes DEST/<run id>/ (manifest.json, results/*.csv, logs/) and deletes
    the run's finished machine. A corrupt or invalid file exits 5 and leaves
    any earlier good copy untouched. Idempotent.

    \b
    Examples:
      bench fetch                       # the latest run
      bench fetch 20261122-081500-a1b2c3 --dest ~/results
      bench fetch --all
    """
    from orchestrator.errors import ResultsError, UsageError
    from orchestrator.service.fetch import fetch as fetch_run
    from orchestrator.service.runs import latest_run_id

    if run_id and fetch_all:
        raise UsageError("give a RUN_ID or --all, not both")
    ctx = make_context()
    out = console()
    if fetch_all:
        records = [r for r in ctx.registry.all() if r.state in ("running", "stopped")]
        if not records:
            out.print("bench: nothing to fetch: every run in the registry is fetched already")
    else:
        records = [ctx.registry.get(run_id or latest_run_id(ctx))]
    incomplete = []
    for record in records:
        try:
            result = fetch_run(ctx, record, dest)
        except ResultsError as e:
            if not fetch_all:
                raise
            incomplete.append(str(e))
            continue
        show_summary(out, result)
        if result.manifest.status != "complete":
            incomplete.append(
                f"{record.run_id} is {result.manifest.status}: {result.manifest.reason}"
            )
    if incomplete:
        raise ResultsError("; ".join(incomplete))
    return 0


def show_summary(out, result) -> None:
    """One row per config: each implementation's median, and the candidate's speedups."""
    from rich.table import Table

    manifest = result.manifest
    samples = next((f.rows for f in manifest.files if f.path.endswith("measurements.csv")), 0)
    out.print(
        f"bench: run [bold]{result.run_id}[/] {manifest.status} → {result.directory} "
        f"({samples} samples, every sha256 verified)"
    )
    if not result.summary or manifest.plan is None:
        return
    plan = manifest.plan
    by_key = {(row.config, row.implementation): row for row in result.summary}
    table = Table(
        "config",
        *[f"{name} ms" for name in plan.implementations],
        *[f"speedup vs {name} [95% CI]" for name in plan.baselines],
    )
    for config in plan.configs:
        medians = [by_key.get((config.name, name)) for name in plan.implementations]
        cells = [f"{row.median_ms:.4f}" if row else "-" for row in medians]
        for baseline in plan.baselines:
            row = by_key.get((config.name, baseline))
            cells.append(
                f"{row.speedup:.2f}x [{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}] "
                f"{row.verdict}"
                if row and row.speedup is not None
                else "-"
            )
        table.add_row(config.name, *cells)
    out.print(table)
    out.print(f"speedup = {plan.candidate}'s: median of per-round paired ratios baseline/candidate")
