from __future__ import annotations

import click

from orchestrator.cli.options import console, make_context


@click.command()
@click.option(
    "--plan", "plan_ref", default="default", show_default=True, help="plan name or .json file"
)
def prices(plan_ref):
    """Show the price catalog and runtime model bench budgets with.

    The catalog: its date, sources and rates. The model: seconds per phase of a
    gce run of the plan on the configured machine and image, on a first run
    (empty caches) and on later runs (environment and kernel build cached in the
    bucket), each figure with its source, and what each costs at the catalog rate.

    \b
    Example:
      bench prices
      bench prices --plan cpu-smoke
    """
    from rich.table import Table

    from orchestrator.budget import load_catalog
    from orchestrator.cli.estimate_table import phase_table
    from orchestrator.service.estimate import gce_estimate

    catalog = load_catalog()
    out = console()
    out.print(
        f"price catalog dated [bold]{catalog['catalog_date']}[/] ({catalog['currency']}/hour)"
    )
    table = Table("region", "item", "on-demand", "spot")
    for region, prices in catalog["regions"].items():
        for group in ("machines", "gpus"):
            for item, price in prices.get(group, {}).items():
                table.add_row(region, item, f"{price['on_demand']:.5f}", f"{price['spot']:.5f}")
        table.add_row(region, "zones with L4s", ", ".join(prices.get("zones", [])), "")
        for disk, price in prices.get("disks", {}).items():
            table.add_row(region, f"{disk} (per GB-month)", f"{price['gb_month']:.3f}", "same")
    out.print(table)
    for name, source in catalog["sources"].items():
        out.print(f"  source ({name}): {source}")
    ctx = make_context()
    estimate = gce_estimate(ctx, plan_ref)
    config = ctx.config
    out.print(
        f"\nruntime model: plan [bold]{estimate.plan.name}[/] on {config.machine_type} + "
        f"{config.accelerator_type} ({'spot' if config.spot else 'on-demand'}), image family "
        f"{config.image_family}"
    )
    columns = {
        "first run": estimate.first_run,
        "later runs": estimate.later_runs,
        "launch uses": estimate.launch,
    }
    out.print(phase_table(columns, estimate.rate.total))
    return 0
