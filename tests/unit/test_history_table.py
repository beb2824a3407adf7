"""`bench history`'s tables (issue 52 item 9): one plan per table, runs marked noisy
flagged with what to do, and words counted right. Built from runs made here, no real run."""

from __future__ import annotations

import io

from orchestrator.cli.history import show_history
from orchestrator.cli.options import console
from orchestrator.service.history import (
    HistoryPoint,
    HistoryRun,
    no_timing_reason,
    ordered_history,
)


def run(run_id: str, median: float, plan: str = "cpu-smoke", noisy: bool = False) -> HistoryRun:
    point = {"b1_s128": HistoryPoint(median, (median * 0.9, median * 1.1))}
    source = "0123456789ab+dirty"  # as long as a source gets: a dirty commit's
    return HistoryRun(
        run_id, "complete", "sdpa", "cpu", None, source, point, plan=plan, noisy=noisy
    )


def shown(history) -> str:
    """What bench history prints at 80 columns (console(): its lines wrapped as stated)."""
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"COLUMNS": "80"}):
        out = console()
        out.file = io.StringIO()
        show_history(out, history)
    return out.file.getvalue()


def tables(text: str) -> list[str]:
    """Each table's lines, from its title ('plan NAME: CONFIG') to the next title."""
    return [block for block in text.split("\nplan ")[1:] if "median ms" in block]


def test_runs_of_two_plans_are_never_one_table_and_changes_stay_within_a_plan():
    runs = [run("20260101-000000-aaaaaa", 1.0, "cpu-smoke")]
    runs += [run("20260102-000000-bbbbbb", 10.0, "cpu-wide")]
    runs += [run("20260103-000000-cccccc", 1.1, "cpu-smoke")]
    text = shown(ordered_history(("sdpa", "cpu"), runs, {}))
    print(text)
    assert "2 plans" in text
    found = tables(text)
    assert len(found) == 2
    smoke = next(t for t in found if "cpu-smoke" in t)
    wide = next(t for t in found if "cpu-wide" in t)
    assert "bbbbbb" not in smoke and "aaaaaa" in smoke and "cccccc" in smoke
    assert "aaaaaa" not in wide and "bbbbbb" in wide
    # The change is from the first run of the same plan: +10%, not -90% or +900%.
    assert "+10.0%" in smoke and "-90" not in text and "+900" not in text


def test_one_plan_says_which_in_its_heading():
    runs = [run("20260101-000000-aaaaaa", 1.0), run("20260103-000000-cccccc", 1.1)]
    text = shown(ordered_history(("sdpa", "cpu"), runs, {}))
    assert "plan cpu-smoke" in text and "plans" not in text


def test_a_run_marked_noisy_is_flagged_with_what_to_do():
    runs = [run("20260101-000000-aaaaaa", 1.0), run("20260103-000000-cccccc", 1.9, noisy=True)]
    text = shown(ordered_history(("sdpa", "cpu"), runs, {}))
    print(text)
    lines = text.splitlines()
    noisy = next(i for i, line in enumerate(lines) if "cccccc" in line)
    assert "(noisy)" in lines[noisy + 1]  # under its run id: the table keeps within 80
    quiet = next(i for i, line in enumerate(lines) if "aaaaaa" in line)
    assert "noisy" not in lines[quiet] + lines[quiet + 1]
    assert "--samples" in text  # the remedy, said once under the tables
    assert "…" not in text and all(len(line) <= 80 for line in lines)


def test_words_are_counted_right():
    text = shown(ordered_history(("sdpa", "cpu"), [run("20260101-000000-aaaaaa", 1.0)], {}))
    assert "1 run " in text and "1 runs" not in text
    text = shown(
        ordered_history(
            ("sdpa", "cpu"), [run(f"2026010{i}-000000-aaaaaa", 1.0) for i in range(1, 4)], {}
        )
    )
    assert "3 runs " in text


def test_a_run_without_a_reason_has_no_empty_parentheses():
    assert no_timing_reason("complete", "") == "complete"
    assert no_timing_reason("complete", None) == "complete"
    assert no_timing_reason("failed", "build failed") == "failed: build failed"
