"""Issue 52 item 11: a fast subset to run while editing. `make test-fast` runs the unit
tests less those marked slow, a marker pytest knows (so a typo in it is no silent skip)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_make_test_fast_runs_the_unit_tests_less_the_slow_ones():
    done = subprocess.run(
        ["make", "-n", "test-fast", "BIN=bin", "STAMP="],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    command = next(line for line in done.stdout.splitlines() if "pytest" in line)
    assert re.search(r'-m "not slow and not gpu" tests/unit$', command), command


def test_the_slow_marker_is_declared():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    assert any(m.startswith("slow:") for m in options["ini_options"]["markers"])
