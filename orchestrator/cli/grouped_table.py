"""Tables laid out for 80 columns and pipes (where rich's width is 80).

A group's heading takes a line of its own (wrapped at spaces, never cut); its rows follow,
their names indented under it; notes about a row go below the group, wrapped with an
indent. Every figure column is as wide as its widest value and never wraps, so a number
is printed whole; the name column has what is left: a name wraps at its spaces, and one
with a word too long for the column takes a line of its own above its figures. Where that
leaves the name too little room, the text columns (`left`) wrap at their spaces too, as
narrow as their longest word (rich would otherwise cut a verdict with an ellipsis:
"cand. not slow…" at 80 columns). Every
group's table has the same column widths, set when rich renders and the width is known,
so the columns line up down the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.padding import Padding
from rich.text import Text

NAME_INDENT = 3  # the indent column and the gap after it
MIN_NAME_WIDTH = 12


@dataclass
class Row:
    name: str  # rich markup, already escaped
    cells: list[str]  # rich markup, one per figure column


@dataclass
class Group:
    heading: str | None  # rich markup; None: the rows need none
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # rich markup, below the rows


class GroupedTable:
    """`headers` name the figure columns; a header may hold a newline (two short lines
    keep a column narrow). Columns named in `left` are left-justified, the rest right."""

    def __init__(
        self,
        name_header: str,
        headers: list[str],
        groups: list[Group],
        title: str | None = None,
        left: frozenset[str] = frozenset(),
    ):
        self.name_header = name_header
        self.headers = headers
        self.groups = groups
        self.title = title
        self.left = left
        rows = [row for group in groups for row in group.rows]
        # Names are indented under headings; a table without headings needs no indent.
        self.indent = NAME_INDENT if any(g.heading is not None for g in groups) else 0
        # The name column needs no more than its longest name (or header word).
        self.longest_name = max(
            [len(word) for word in name_header.split()]
            + [len(Text.from_markup(row.name).plain) for row in rows]
        )
        self.widths = [
            max(
                [len(line) for line in header.split("\n")]
                + [len(Text.from_markup(row.cells[i]).plain) for row in rows]
            )
            for i, header in enumerate(headers)
        ]
        # What a text column needs when it wraps at its spaces: its longest word.
        self.word_widths = [
            max(
                [len(word) for word in header.split()]
                + [
                    len(word)
                    for row in rows
                    for word in Text.from_markup(row.cells[i]).plain.split()
                ]
            )
            if header in left
            else width
            for i, (header, width) in enumerate(zip(headers, self.widths, strict=True))
        ]

    def __rich_console__(self, console, options):
        widths = self.widths
        # Two characters between columns (collapse_padding), none at the edges.
        room = options.max_width - sum(widths) - 2 * len(widths) - self.indent
        if room < min(self.longest_name, MIN_NAME_WIDTH):
            widths = self.word_widths
            room = options.max_width - sum(widths) - 2 * len(widths) - self.indent
        name_width = max(min(room, self.longest_name), MIN_NAME_WIDTH)
        if self.title:
            yield wrapped(self.title, style="bold")
        yield self._table(name_width, widths, show_header=True)
        for group in self.groups:
            if group.heading is not None:
                yield wrapped(f"[bold]{group.heading}[/]")
            table = self._table(name_width, widths, show_header=False)
            for row in group.rows:
                name = Text.from_markup(row.name).plain
                if max(len(word) for word in name.split() or [""]) > name_width:
                    # A word folded would read as two names: the name takes a line of its
                    # own above its figures.
                    if table.row_count:
                        yield table
                    yield Padding(wrapped(row.name), (0, 0, 0, self.indent))
                    table = self._table(name_width, widths, show_header=False)
                    self._add(table, "", row.cells)
                else:
                    self._add(table, row.name, row.cells)
            if table.row_count:
                yield table
            for note in group.notes:
                yield Padding(wrapped(note), (0, 0, 0, self.indent))

    def _add(self, table, name: str, cells: list[str]) -> None:
        table.add_row(*([""] if self.indent else []), name, *cells)

    def _table(self, name_width: int, widths: list[int], show_header: bool):
        from rich import box
        from rich.table import Table

        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
            show_header=show_header,
        )
        if self.indent:  # the names under their group's heading
            table.add_column("", width=self.indent - 2)
        table.add_column(self.name_header, width=name_width, overflow="fold")
        for header, width in zip(self.headers, widths, strict=True):
            if header in self.left:  # text: wraps at its spaces where it must
                table.add_column(header, width=width, justify="left", overflow="fold")
            else:
                table.add_column(header, width=width, justify="right", no_wrap=True)
        return table


def wrapped(markup: str, style: str = "") -> Text:
    """Text that wraps at its spaces (a console with soft_wrap would not wrap it) and
    folds a word longer than the line, never cutting it."""
    text = Text.from_markup(markup, style=style, overflow="fold")
    text.no_wrap = False
    return text
