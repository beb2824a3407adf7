"""`bench report`'s results table, laid out for 80 columns and pipes.

A config is a heading row; its implementations are indented under it, each named with the
backend that actually ran. Numbers never wrap (a column of them is as wide as its widest
value) and are printed to significant digits, so they stay short; only names fold.
Verdicts and flags are abbreviated where they would widen the table; the legend says how.
"""

from __future__ import annotations

import math

from rich.text import Text

from orchestrator.boundary import markup_safe
from orchestrator.report import Report, ReportRow, implementation_label

# Long words that would set the verdict column's width, and their short forms.
SHORT_VERDICTS = {
    "indistinguishable": "indist.",
    "equivalent": "equiv.",
    "wrong-timed-output": "wrong out",
}


def significant(value: float, digits: int) -> str:
    """`digits` significant digits without an exponent where that stays short: 0.0804,
    111.8, 13170; an exponent below 0.001 or from a million up."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if not 1e-3 <= magnitude < 1e6:
        return f"{value:.{digits - 1}e}"
    decimals = max(digits - 1 - math.floor(math.log10(magnitude)), 0)
    return f"{value:.{decimals}f}"


_FIGURE_HEADERS = ("median ms", "TFLOP/s", "%peak", "speedup", "95% CI", "verdict")


def results_table(report: Report) -> ResultsTable:
    return ResultsTable(report)


class ResultsTable:
    """A heading line per config (never folded: it has the whole width), then a table of
    its implementations. Every table has the same column widths, set when rich renders
    and the width is known: the figure columns as wide as their widest value, the name
    column the rest (names wrap at spaces, fold only where a name has none)."""

    def __init__(self, report: Report):
        self.report = report
        self.modes = {row.mode for row in report.rows}
        figures = [_figures(row, report.candidate) for row in report.rows]
        self.cells = {id(row): cells for row, cells in zip(report.rows, figures, strict=True)}
        headers = (*(("mode",) if len(self.modes) > 1 else ()), *_FIGURE_HEADERS)
        self.headers = headers
        self.widths = [
            max([len(header)] + [len(Text.from_markup(c[i]).plain) for c in self._rows()])
            for i, header in enumerate(headers)
        ]

    def _rows(self):
        for row in self.report.rows:
            yield ([row.mode] if len(self.modes) > 1 else []) + self.cells[id(row)]

    def title(self) -> str:
        report = self.report
        title = f"run {markup_safe(report.run_id)} ({markup_safe(report.status)})"
        if report.candidate:
            title += f"; candidate {markup_safe(report.candidate)}"
            if report.candidate_source:
                title += f" ({markup_safe(report.candidate_source)})"
        if len(self.modes) == 1:
            title += f"; timing: {markup_safe(next(iter(self.modes)))}"
        return title

    def __rich_console__(self, console, options):
        # Two characters between columns (collapse_padding), none at the edges; the first
        # column, one blank, indents the implementations under their config's heading.
        name_width = options.max_width - sum(self.widths) - 2 * len(self.widths) - 3
        # Wrapped at its spaces (the console's soft wrap would not): a user's kernel's name
        # and commit can make it long.
        title = Text.from_markup(self.title(), style="bold", overflow="fold")
        title.no_wrap = False
        yield title
        yield self._table(max(name_width, 12), show_header=True)
        for config, rows in _by_config(self.report.rows).items():
            yield Text.from_markup(f"[bold]{markup_safe(config)}[/]")
            table = self._table(max(name_width, 12), show_header=False)
            for row in rows:
                cells = ([row.mode] if len(self.modes) > 1 else []) + self.cells[id(row)]
                table.add_row("", _name(row, self.report.candidate), *cells)
            yield table

    def _table(self, name_width: int, show_header: bool):
        from rich import box
        from rich.table import Table

        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
            show_header=show_header,
        )
        table.add_column("", width=1)
        table.add_column("implementation (backend)", width=name_width, overflow="fold")
        for header, width in zip(self.headers, self.widths, strict=True):
            justify = "left" if header in ("mode", "verdict") else "right"
            table.add_column(header, width=width, justify=justify, no_wrap=True)
        return table


def legend(report: Report) -> str | None:
    """What the abbreviations and the speedup column mean, below the table."""
    used = {v for row in report.rows for v in (row.verdict, row.flag) if v in SHORT_VERDICTS}
    parts = [f"{SHORT_VERDICTS[v]} = {v}" for v in sorted(used)]
    if any(row.speedup is not None for row in report.rows):
        parts.insert(0, "speedup: the candidate's over the row (A/A control: over its twin)")
    return "; ".join(parts) or None


def _by_config(rows: list[ReportRow]) -> dict[str, list[ReportRow]]:
    grouped: dict[str, list[ReportRow]] = {}
    for row in rows:
        grouped.setdefault(row.config, []).append(row)
    return grouped


def _name(row: ReportRow, candidate: str | None) -> str:
    name = markup_safe(implementation_label(row.implementation, [row.backend]))
    if row.versus and row.versus != candidate:
        name += f" vs {markup_safe(row.versus)}"
    return name


def _figures(row: ReportRow, candidate: str | None) -> list[str]:
    peak = significant(row.pct_of_peak, 3) if row.pct_of_peak is not None else "-"
    speedup = ci = "-"
    if row.speedup is not None:
        speedup = f"{significant(row.speedup, 3)}x"
    elif row.implementation == candidate or (candidate is None and not row.flag):
        speedup = "cand."
    if row.speedup_ci is not None:
        low, high = row.speedup_ci
        ci = f"{significant(low, 3)}–{significant(high, 3)}"  # an en dash: "1e-05" has a hyphen
    verdict = row.verdict or row.flag or ""
    return [
        significant(row.median_ms, 4),
        significant(row.tflops, 3),
        peak,
        speedup,
        ci,
        markup_safe(SHORT_VERDICTS.get(verdict, verdict)),
    ]
