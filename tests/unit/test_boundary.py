"""The trust boundary's building blocks: escaping for print, strict JSON, the cut last row."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
from rich.console import Console

from orchestrator.backends.registry import billed
from orchestrator.boundary import LIMITS, parse_json
from orchestrator.errors import RefusedError
from orchestrator.registry import RunRecord, RunRegistry
from orchestrator.text import markup_safe, printable
from results_schema.record import drop_cut_line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("bell\x07", "bell\\x07"),
        ("del\x7f", "del\\x7f"),
        ("c1 \x9b31m", "c1 \\x9b31m"),
        ("line\nbreak\r", "line\\x0abreak\\x0d"),
        ("bidi \u202e", "bidi \\u202e"),
        ("plain ünïcode ✓", "plain ünïcode ✓"),
    ],
)
def test_printable_escapes_every_control_character(text, shown):
    assert printable(text) == shown


def test_markup_safe_prints_markup_as_written():
    out = io.StringIO()
    console = Console(file=out, width=200, emoji=False)
    text = "oops [/] [bold red]x[/] [link=https://evil.example]ok[/link] \x1b]52;c;e30=\x07"
    console.print(f"reason: {markup_safe(text)}")
    assert out.getvalue() == f"reason: {printable(text)}\n"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "a": 2}',
        b'{"a": NaN}',
        b'{"a": -Infinity}',
        b"[" * 10_000 + b"]" * 10_000,
        json.dumps({"a": "x" * (LIMITS.string_chars + 1)}).encode(),
        json.dumps(list(range(LIMITS.json_items + 1))).encode(),
        b'"\xff"',
    ],
)
def test_parse_json_refuses(raw):
    with pytest.raises(ValueError):
        parse_json(raw, max_bytes=1 << 20)


def test_parse_json_refuses_more_bytes_than_allowed():
    with pytest.raises(ValueError, match="bytes"):
        parse_json(b"[1, 2, 3]", max_bytes=4)


def test_a_cut_last_row_is_dropped_and_whole_rows_stay(tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"a,b\n1,2\n3,")
    drop_cut_line(str(path))
    assert path.read_bytes() == b"a,b\n1,2\n"
    drop_cut_line(str(path))
    assert path.read_bytes() == b"a,b\n1,2\n"


def _record(run_id: str, state: str = "running") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        backend="gce",
        plan="p",
        budget_usd=1.0,
        rate_usd_per_hour=0.5,
        max_run_seconds=3600,
        estimated_seconds=60,
        created_at=datetime.now(timezone.utc).isoformat(),
        state=state,
    )


def test_a_refused_reservation_inserts_nothing(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite", billed_backends=billed())
    registry.reserve(_record("20261123-000000-aaaaaa", "launching"))

    def cap(committed: float) -> None:
        assert committed == 1.0  # the launching run holds its whole budget
        raise RefusedError("over the cap")

    with pytest.raises(RefusedError):
        registry.reserve(_record("20261123-000001-bbbbbb"), cap)
    assert [r.run_id for r in registry.all()] == ["20261123-000000-aaaaaa"]


@pytest.mark.parametrize(
    ("cell", "refused"),
    [
        ("=1+2", True),
        ("+1+2", True),
        ("-2+3", True),
        ("@SUM(A1)", True),
        ("-", True),
        ("a\x00b", True),
        ("-1.5", False),
        ("+2", False),
        ("-1e-3", False),
        (".5", False),
        ("fp16-b4h16s1024d64-causal", False),
        ("relative L2 error 0.002 over tolerance 0.001", False),
    ],
)
def test_a_cell_a_spreadsheet_would_run_is_told_apart_from_data(cell, refused):
    from orchestrator.boundary.files import _spreadsheet_hazard

    assert (_spreadsheet_hazard(cell) is not None) == refused
