"""Text for a person: what bench prints of a string it did not write, and a duration.

Anything from a run, a bucket or a user's tree passes `printable` (control and format
characters escaped) before a terminal sees it, or `markup_safe` (that, and rich markup
shown as text) before rich does. Stdlib only, so the CLI and the trust boundary import it
without each other.
"""

from __future__ import annotations

import unicodedata


def printable(value: object, max_chars: int | None = None) -> str:
    """Text with every control or format character (C0, DEL, C1, bidi overrides) shown as
    an escape, so nothing from a run can drive the terminal."""
    text = str(value)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars] + "…"
    return "".join(_escaped(ch) if _is_control(ch) else ch for ch in text)


def markup_safe(value: object, max_chars: int | None = None) -> str:
    """`printable`, and rich markup shown as text, for a string rich will print."""
    from rich.markup import escape

    return escape(printable(value, max_chars))


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def format_duration(seconds: float) -> str:
    """`1h05m`, `4m09s`, `7s`: whole seconds, the largest two units."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
