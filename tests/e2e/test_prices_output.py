"""`bench prices` prints what it printed before the CLI went through the pricing service
(issue 51): its text, its --json and its --refresh line, on the bundled catalog, on a fresh
Cloud Billing Catalog API read (the stand-in) and on a read a week old, each pinned in
tests/e2e/prices_output/. The figures move only with the catalog or the runtime model:
after such a change, PIN_PRICES=write rewrites the pins; read the diff."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.backends.gce import billing_catalog
from orchestrator.cli import main
from tests.fakes.billing_server import FakeBilling

PINS = Path(__file__).parent / "prices_output"
TODAY = datetime.now(UTC).date()


def printed(args: list[str], capsys, bench_env: Path) -> str:
    """What `bench ARGS` printed, stdout then stderr, with what differs between two days
    or two test folders (today's date, the folder) named rather than given."""
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr()
    text = f"$ bench {' '.join(args)}\n{out.out}--- stderr\n{out.err}"
    stale = TODAY - timedelta(days=8)
    for day, name in ((TODAY, "<today>"), (stale, "<a week ago and a day>")):
        text = text.replace(day.isoformat(), name)
    return text.replace(str(bench_env), "<test folder>")


def pinned(name: str, text: str) -> None:
    path = PINS / f"{name}.txt"
    if os.environ.get("PIN_PRICES") == "write":
        path.write_text(text)
    assert text == path.read_text(), f"`bench prices` output changed: {path}"


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")


def test_prices_on_the_bundled_catalog(bench_env, wide, capsys):
    for name, args in [
        ("bundled", ["prices"]),
        ("bundled-json", ["prices", "--json"]),
        ("bundled-cpu-smoke", ["prices", "--plan", "cpu-smoke"]),
    ]:
        pinned(name, printed(args, capsys, bench_env))


def test_prices_on_an_api_read_fresh_and_a_week_old(bench_env, wide, capsys, monkeypatch):
    with FakeBilling(page_size=50) as server:
        monkeypatch.setenv("BENCH_BILLING_ENDPOINT", server.endpoint)
        pinned("refresh", printed(["prices", "--refresh"], capsys, bench_env))
        pinned("refresh-json", printed(["prices", "--refresh", "--json"], capsys, bench_env))
    pinned("api", printed(["prices"], capsys, bench_env))
    cache = bench_env / "state" / billing_catalog.CACHE_NAME
    cached = json.loads(cache.read_text())
    read_at = datetime.now(UTC) - timedelta(days=8)
    cache.write_text(json.dumps({**cached, "read_at": read_at.isoformat()}))
    pinned("stale", printed(["prices"], capsys, bench_env))
    pinned("stale-json", printed(["prices", "--json"], capsys, bench_env))
