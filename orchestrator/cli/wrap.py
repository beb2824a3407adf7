"""Lines that fit the terminal: broken at spaces, never inside a word.

Where the output is a terminal, or COLUMNS says how wide its reader is, each line a
person reads is broken at its spaces to fit: a run id, a path or a command is one word, so
it stays whole for copy and paste (a word longer than the terminal stands alone on its
line, rather than cut), and the lines after a line's first hang two columns deeper, so a
wrapped message reads as one. Piped with no COLUMNS (a CI log, `| grep`) a line stays
whole: the viewer wraps it, and grep finds all of it. Tables are rich's, which fit them to
the same width (80 in a pipe).
"""

from __future__ import annotations

import os
import sys

DEFAULT_WIDTH = 80
HANG = 2


def stated_columns() -> int | None:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def wrap_width(stream) -> int | None:
    """The width to wrap lines written to `stream` at, or None to leave them whole."""
    stated = stated_columns()
    if stated is not None:
        return stated
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, OSError, ValueError):
        return None


def pieces(line: str, width: int) -> list[tuple[int, int]]:
    """(start, end) of each piece `line` wraps into at `width`: broken at runs of spaces
    (dropped), each piece after the first `HANG` columns deeper than the line's indent."""
    indent = len(line) - len(line.lstrip(" "))
    hang = len(hang_of(line, width))
    spans, start, limit = [], 0, width
    while len(line) - start > limit:
        cut = line.rfind(" ", start + 1, start + limit + 1)
        while cut > start and line[cut - 1] == " ":
            cut -= 1
        if cut <= start + (indent if start == 0 else 0):
            cut = line.find(" ", start + limit)  # one long word: alone, whole
            if cut == -1:
                break
        spans.append((start, cut))
        start = cut
        while start < len(line) and line[start] == " ":
            start += 1
        limit = width - hang
    spans.append((start, len(line)))
    return spans


def hang_of(line: str, width: int) -> str:
    return " " * min(len(line) - len(line.lstrip(" ")) + HANG, width // 2)


def wrap_text(text: str, width: int | None) -> str:
    """`text` with each of its lines wrapped (pieces); as it is when `width` is None."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        spans = pieces(line, width)
        out.append(line[slice(*spans[0])])
        out += [hang_of(line, width) + line[slice(*span)] for span in spans[1:]]
    return "\n".join(out)


def echo(text: str = "", err: bool = False) -> None:
    """click.echo of a line a person reads, wrapped to the terminal (wrap_width)."""
    import click

    click.echo(wrap_text(text, wrap_width(sys.stderr if err else sys.stdout)), err=err)


def shell_comment(text: str, width: int | None) -> str:
    """A `# ...` comment that a shell still reads as one when wrapped: each line a comment."""
    if width is None:
        return text
    lines = wrap_text(text, width).split("\n")
    return "\n".join([lines[0], *("#" + line[1:] for line in lines[1:])])


def shell_command(parts: list[str], width: int | None) -> str:
    """A command line to paste into a shell: quoted parts, and where it is wider than
    `width`, continued with ` \\` at a space between parts, never inside one."""
    import shlex

    quoted = [shlex.quote(part) for part in parts]
    if width is None:
        return " ".join(quoted)
    lines, current = [], ""
    for part in quoted:
        candidate = f"{current} {part}" if current else part
        if current and len(candidate) + len(" \\") > width:
            lines.append(current + " \\")
            current = "    " + part
        else:
            current = candidate
    return "\n".join([*lines, current])
