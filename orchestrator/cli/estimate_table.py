"""The runtime model as a table: one row per phase, a column per estimate, and the sources."""

from __future__ import annotations

from orchestrator.runtime_model import RuntimeEstimate
from results_schema.record import billed_usd


def phase_table(
    columns: dict[str, RuntimeEstimate],
    rate_usd_per_hour: float | None = None,
    price_source: str = "",
):
    """Seconds per phase under each heading; the last rows give each total and its cost,
    saying which prices (`price_source`: which catalog, of which date) it used."""
    from rich.table import Table

    from orchestrator.budget import format_duration

    table = Table("phase", *columns, "source")
    estimates = list(columns.values())
    for index, figure in enumerate(estimates[0].phases):
        row = [e.phases[index] for e in estimates]
        sources = list(dict.fromkeys(f.source for f in row))
        table.add_row(figure.phase, *(f"{f.seconds:.0f} s" for f in row), " | ".join(sources))
    totals = [format_duration(e.total_seconds) for e in estimates]
    table.add_row("[bold]total[/]", *(f"[bold]{t}[/]" for t in totals), "")
    if rate_usd_per_hour:
        costs = [f"${billed_usd(rate_usd_per_hour, e.total_seconds):.4f}" for e in estimates]
        prices = f" ({price_source})" if price_source else ""
        table.add_row("cost", *costs, f"at ${rate_usd_per_hour:.4f}/h{prices}, 1-minute minimum")
    return table
