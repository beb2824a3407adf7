from __future__ import annotations

import click

from orchestrator.cli.options import console


@click.command()
def prices():
    """Show the price catalog bench budgets with: its date, sources and rates.

    \b
    Example:
      bench prices
    """
    from rich.table import Table

    from orchestrator.budget import load_catalog

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
    return 0
