"""The runtime model as a table: one row per phase, a column per estimate; each figure's
source (a sentence with its link) is numbered in the table and written out below it."""

from __future__ import annotations

from orchestrator.runtime_model import RuntimeEstimate
from orchestrator.text import markup_safe
from results_schema.record import billed_usd


def phase_table(
    columns: dict[str, RuntimeEstimate],
    rate_usd_per_hour: float | None = None,
    price_source: str = "",
):
    """Seconds per phase under each heading; the last rows give each total and its cost,
    saying which prices (`price_source`: which catalog, of which date) it used."""
    from rich.console import Group as RenderGroup

    from orchestrator.cli.grouped_table import Group, GroupedTable, Row
    from orchestrator.text import format_duration

    notes: dict[str, int] = {}  # source text -> its number, in order of first use

    def cited(*sources: str) -> str:
        numbers = [notes.setdefault(s, len(notes) + 1) for s in dict.fromkeys(sources)]
        return ",".join(f"[{n}]" for n in numbers)

    estimates = list(columns.values())
    group = Group(None)
    for index, figure in enumerate(estimates[0].phases):
        row = [e.phases[index] for e in estimates]
        cells = [f"{f.seconds:.0f} s" for f in row]
        group.rows.append(Row(figure.phase, [*cells, cited(*(f.source for f in row))]))
    totals = [f"[bold]{format_duration(e.total_seconds)}[/]" for e in estimates]
    group.rows.append(Row("[bold]total[/]", [*totals, ""]))
    if rate_usd_per_hour:
        costs = [f"${billed_usd(rate_usd_per_hour, e.total_seconds):.4f}" for e in estimates]
        prices = f" ({price_source})" if price_source else ""
        priced = f"costs at ${rate_usd_per_hour:.4f}/h{prices}, 1-minute minimum"
        group.rows.append(Row("cost", [*costs, cited(priced)]))
    table = GroupedTable("phase", [*columns, "source"], [group], left=frozenset({"source"}))
    return RenderGroup(table, _numbered(notes))


def _numbered(notes: dict[str, int]):
    """Each source after its number, wrapped beside it."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for source, number in notes.items():
        grid.add_row(f"\\[{number}]", markup_safe(source))
    return grid
