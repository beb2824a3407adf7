from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, console, make_context


@click.command()
@cloud_options
@click.option(
    "--plan", "plan_ref", default="default", show_default=True, help="plan name or .json file"
)
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout, for scripts")
@click.option(
    "--refresh",
    is_flag=True,
    help="read Compute Engine's prices from the Cloud Billing Catalog API (your Google "
    "credentials) and keep them a week",
)
def prices(plan_ref, as_json, refresh):
    """Show the price catalog and runtime model bench budgets with.

    The catalog: its date, sources and rates; the GPU types `launch --gpu`
    takes (machine, arch, zones, peak). The model: seconds per phase of a
    gce run of the plan on the configured machine and image, on a first run
    (empty caches) and on later runs (environment and kernel build cached in the
    bucket), each figure with its source, and what each costs at the catalog rate.
    Then, for each backend whose cloud retries a run (Cloud Batch), what $1.00
    buys there: each attempt's maxRunDuration, how many attempts (retries on
    preemption), and all of them at their worst, at the dearest allowed
    region's rate: the figures `launch --backend batch` configures.

    Prices come from the last `--refresh` while it is under 7 days old (items it
    did not find, and every item after a week, from bench's bundled catalog, with
    a warning naming the read it dropped).

    The time cap prices a spot machine and its GPUs at the on-demand rate: spot
    prices may change once a day with no floor on the discount, so the cap's
    worst case holds whatever they become; the estimate stays at spot prices.

    \b
    Example:
      bench prices
      bench prices --refresh
      bench prices --plan cpu-smoke
      bench prices --json | jq .rate_usd_per_hour
    """
    from orchestrator.cli.estimate_table import phase_table
    from orchestrator.service.estimate import price_sheet
    from orchestrator.text import format_duration

    ctx = make_context()
    out = console()

    def refreshed(read) -> None:  # under --json to stderr: stdout is one document
        click.echo(
            f"read {read.entries_read} SKUs from the {read.source}: {read.items_priced} items "
            f"priced, saved to {read.saved_to}",
            err=as_json,
        )

    sheet = price_sheet(ctx, plan_ref, on_refreshed=refreshed if refresh else None)
    catalog, estimate = sheet.catalog, sheet.estimate
    if as_json:
        return _print_json(sheet)
    if catalog.get("price_warning"):
        from orchestrator.text import markup_safe

        out.print(f"[bold yellow]bench: warning:[/] {markup_safe(catalog['price_warning'])}")
    out.print(f"{_catalog_heading(catalog)} ({catalog['currency']}/hour)")
    out.print(price_table(catalog))
    for name, source in catalog["sources"].items():
        out.print(f"  source ({name}): {source}")
    _gpu_types(out, sheet.gpu_types)
    config = ctx.config
    out.print(
        f"\nruntime model: plan [bold]{estimate.plan.name}[/] on {config.machine_type} + "
        f"{config.accelerator_type} ({'spot' if config.spot else 'on-demand'}), image family "
        f"{config.image_family}",
        soft_wrap=False,
    )
    columns = {
        "first run": estimate.first_run,
        "later runs": estimate.later_runs,
        "launch uses": estimate.launch,
    }
    out.print(phase_table(columns, estimate.rate.total, estimate.rate.price_source))
    rate = estimate.rate
    out.print(
        f"total rate ${rate.total:.4f}/h ({', '.join(f'{n} ${p:.4f}' for n, p in rate.items)}) "
        f"in {rate.region}; $1.00 buys {format_duration(sheet.one_dollar_seconds)}"
        f" (the time cap, its worst-case bill within $1.00 at {sheet.rate_text})",
        soft_wrap=False,
    )
    for title, terms in sheet.one_dollar_attempts.values():
        line = terms if isinstance(terms, str) else f"$1.00 buys {terms.summary}"
        out.print(f"{title}: {line}", markup=False, highlight=False, soft_wrap=False)
    return 0


def _catalog_heading(catalog) -> str:
    """Which catalog, of which date; with an API read, which items it did not price (*)."""
    bundled = f"bench's bundled catalog, dated {catalog['catalog_date']}"
    if not catalog.get("api_read_date"):
        return f"price catalog dated [bold]{catalog['catalog_date']}[/]"
    return (
        f"prices from the Cloud Billing Catalog API, read [bold]{catalog['api_read_date']}"
        f"[/]; items marked * from {bundled}"
    )


def _print_json(sheet) -> int:
    import dataclasses
    import json

    from results_schema.record import billed_usd

    def phases(e):
        return {f.phase: round(f.seconds, 1) for f in e.phases}

    catalog, estimate = sheet.catalog, sheet.estimate
    rate = estimate.rate
    document = {
        "catalog_date": catalog["catalog_date"],
        "api_read_date": catalog.get("api_read_date"),
        "currency": catalog["currency"],
        "region": rate.region,
        "spot": rate.spot,
        "rate_usd_per_hour": rate.total,
        "rate_items": dict(rate.items),
        "seconds_one_dollar_buys": sheet.one_dollar_seconds,
        "price_source": rate.price_source,
        "price_warning": catalog.get("price_warning"),
        "plan": estimate.plan.name,
        "first_run_seconds": phases(estimate.first_run),
        "later_runs_seconds": phases(estimate.later_runs),
        "launch_estimate_seconds": estimate.launch.total_seconds,
        "launch_estimate_usd": round(billed_usd(rate.total, estimate.launch.total_seconds), 6),
        # What $1.00 buys where the cloud retries a run, by backend; a string: refused.
        "one_dollar_attempts": {
            name: terms if isinstance(terms, str) else dataclasses.asdict(terms)
            for name, (_, terms) in sheet.one_dollar_attempts.items()
        },
    }
    click.echo(json.dumps(document, indent=2))
    return 0


def price_table(catalog):
    """A heading per region, its machines, GPUs and disks below it with their hourly
    prices; the zones it has GPUs in last."""
    from orchestrator.cli.grouped_table import Group, GroupedTable, Row

    groups = []
    for region, prices in catalog["regions"].items():
        group = Group(region)
        for kind in ("machines", "gpus"):
            for item, price in prices.get(kind, {}).items():
                cells = [f"{price['on_demand']:.5f}", f"{price['spot']:.5f}"]
                group.rows.append(Row(_marked(item, price, catalog), cells))
        for disk, price in prices.get("disks", {}).items():
            name = _marked(f"{disk} (per GB-month)", price, catalog)
            group.rows.append(Row(name, [f"{price['gb_month']:.3f}", "same"]))
        group.notes.append(f"zones with a GPU: {', '.join(prices.get('zones', [])) or 'none'}")
        groups.append(group)
    return GroupedTable("item", ["on-demand", "spot"], groups)


def _marked(name: str, price: dict, catalog: dict) -> str:
    """An item the API read did not price, where there was one: its name and a *."""
    return f"{name}*" if catalog.get("api_read_date") and not price.get("from_api") else name


def _gpu_types(out, catalog) -> None:
    """The GPU types `launch --gpu` takes (orchestrator/data/gpus.toml), each with its kind's
    figures and their sources (results_schema/gpu_kinds.json)."""
    from orchestrator.cli.grouped_table import Group, GroupedTable, Row

    groups = []
    for gpu in catalog.values():
        group = Group(f"{gpu.key} ({gpu.name})")
        figures = [gpu.arch, f"{gpu.peak_tflops:g}", f"{gpu.bandwidth_gb_s:g}"]
        group.rows.append(Row(f"{gpu.machine_type} + {gpu.accelerator_type}", figures))
        provisioning = ", ".join(p.lower() for p in gpu.provisioning)
        group.notes.append(f"provisioning: {provisioning}")
        group.notes.append(f"zones: {', '.join(gpu.zones)}")
        groups.append(group)
    title = "GPU types `launch --gpu` takes (peak: dense 16-bit tensor TFLOP/s)"
    out.print(GroupedTable("machine + GPU", ["arch", "peak", "GB/s"], groups, title))
    for gpu in catalog.values():
        out.print(f"  source ({gpu.key} peak): {gpu.peak_tflops_source}")
        out.print(f"  source ({gpu.key} bandwidth): {gpu.bandwidth_source}")
