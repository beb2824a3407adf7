"""The subset of the Compute list `filter` syntax that bench sends.

Supported: terms `FIELD = VALUE` / `FIELD != VALUE` (also `eq`/`ne`), VALUE quoted or bare,
`*` as a wildcard, terms ANDed by juxtaposition, optional parentheses or `AND`.
FIELD is `labels.KEY` or a top-level instance field (`name`, `status`, ...). `OR` is
refused with 400 so that a test never passes on a filter the stand-in does not understand.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from .gce_errors import invalid

_TERM = re.compile(
    r"""\(?\s*(?P<field>[A-Za-z][\w.\-]*)\s*(?P<op>!=|=|\beq\b|\bne\b)\s*
        (?:"(?P<quoted>[^"]*)"|(?P<bare>[^\s()"]+))\s*\)?""",
    re.VERBOSE,
)


def compile_filter(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate over instance JSON; raises GceError(400) on what it cannot parse."""
    if not text or not text.strip():
        return lambda _resource: True
    if re.search(r"\bOR\b", text):
        raise invalid(f"Invalid list filter expression '{text}' (OR is not supported here).")
    terms = []
    position = 0
    stripped = re.sub(r"\bAND\b", " ", text)
    for match in _TERM.finditer(stripped):
        if stripped[position : match.start()].strip():
            break
        terms.append(match)
        position = match.end()
    if not terms or stripped[position:].strip():
        raise invalid(f"Invalid list filter expression '{text}'.")

    def predicate(resource: dict[str, Any]) -> bool:
        return all(_term_holds(term, resource) for term in terms)

    return predicate


def _term_holds(term: re.Match[str], resource: dict[str, Any]) -> bool:
    field, op = term["field"], term["op"]
    wanted = term["quoted"] if term["quoted"] is not None else term["bare"]
    if field.startswith("labels."):
        actual = (resource.get("labels") or {}).get(field[len("labels.") :])
    else:
        actual = resource.get(field)
    if op in ("eq", "ne"):  # eq/ne take a RE2 regular expression over the whole value
        matched = actual is not None and re.fullmatch(wanted, str(actual)) is not None
    else:
        matched = actual is not None and fnmatch.fnmatchcase(str(actual), wanted)
    return matched if op in ("=", "eq") else not matched
