"""`bench history` over real local runs (CPU): their order, their medians, the plot, and a
results folder holding hostile names.

Two real runs of a two-config plan are fetched once; the tests copy them and place them on
the commits of a small git repository made here, so commit order and launch order differ.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.report import MAX_FIGURE_INCHES, PLOT_DPI
from orchestrator.service.history import HistoryPoint, HistoryRun, ordered_history
from results_schema import Manifest

HOSTILE_GPU = "[red]GPU[/red]\x1b[2J"
# No "/": a folder name cannot hold one.
HOSTILE_FOLDER = "[bold]not-a-run[blink]\x1b]0;owned\x07"


@pytest.fixture
def fetched_runs(two_local_runs):
    """(results folder, [run ids in launch order]) of the session's two real local runs,
    launched and fetched once (tests/e2e/conftest.py)."""
    return Path(two_local_runs["dest"]), two_local_runs["run_ids"]


@pytest.fixture
def two_runs(bench_env, tmp_path, fetched_runs):
    """A copy of the module's two fetched runs, for this test to change."""
    fetched, run_ids = fetched_runs
    dest = tmp_path / "results"
    shutil.copytree(fetched, dest)
    return dest, run_ids


def git(repo, *args) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True)
    return done.stdout.decode().strip()


def commits_in(repo, count: int) -> list[str]:
    """A fresh repository with `count` commits, oldest first."""
    git(repo, "init", "-q")
    for index in range(count):
        ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
        git(repo, *ident, "commit", "-q", "--allow-empty", "-m", f"c{index}")
    return git(repo, "rev-list", "--reverse", "HEAD").split()


def place(run_dir, commit: str, gpu: str | None = None) -> None:
    """The run as if its candidate had been built from `commit` (on `gpu`)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["plan"]["candidate_source"]["commit"] = commit
    manifest["plan"]["candidate_source"]["dirty"] = False
    if gpu is not None:
        manifest["environment"]["gpu_name"] = gpu
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def test_runs_in_commit_order_with_medians_and_a_bounded_plot(
    two_runs, tmp_path, capsys, monkeypatch
):
    dest, (first, second) = two_runs
    manifest = Manifest.model_validate_json((dest / first / "manifest.json").read_text())
    assert manifest.plan.candidate_source is not None  # kept at launch, carried to the run
    # The later launch on the older commit: commit order, not launch order, puts it first.
    older, newer = commits_in(tmp_path / "work", 2)
    place(dest / first, newer, HOSTILE_GPU)
    place(dest / second, older, HOSTILE_GPU)
    (dest / HOSTILE_FOLDER).mkdir()
    png = tmp_path / "drift.png"

    # An 80-column terminal, stated: a pipe's lines are left whole by design (cli/wrap.py),
    # and a run judged noisy adds a line longer than 80 (this test failed on a loaded host).
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["history", "--dest", str(dest), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    print(out)  # shown when the test fails
    assert "in commit order" in out
    # Markup and control characters from the runs are shown as text, never obeyed.
    assert "[red]GPU[/red]\\x1b[2J" in out and "\x1b" not in out
    assert "skipped [bold]not-a-run[blink]\\x1b]0;owned\\x07: not named by a run id" in out
    # Every line but the plot's path (the test's temporary folder) fits 80 columns.
    assert all(len(line) <= 80 for line in out.splitlines() if str(png) not in line)
    for config in manifest.plan.configs:
        table = out.split(config.name, 1)[1]
        assert table.index(second) < table.index(first)
        for run_id in (first, second):
            row = next(line for line in table.splitlines() if run_id in line)
            median = json_median(dest / run_id, config.name, manifest.plan.candidate)
            assert f"{median:.4g}" in row and older[:12] in table and newer[:12] in table

    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert 0 < width <= MAX_FIGURE_INCHES[0] * PLOT_DPI
    assert 0 < height <= MAX_FIGURE_INCHES[1] * PLOT_DPI


def json_median(run_dir, config: str, candidate: str) -> float:
    """The candidate's median in summary.csv, as the run wrote it."""
    import csv

    with open(run_dir / "results" / "summary.csv", newline="") as f:
        row = next(
            r
            for r in csv.DictReader(f)
            if (r["config"], r["implementation"]) == (config, candidate)
        )
    return float(row["median_ms"])


def test_without_a_repository_runs_follow_launch_time(two_runs, tmp_path, capsys):
    dest, (first, second) = two_runs
    assert main(["history", "--dest", str(dest), "--kernel", "sdpa", "--gpu", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "in run time order" in out and out.index(first) < out.index(second)
    assert (dest / "history.png").is_file()


def test_an_invalid_run_is_skipped_with_its_reason(two_runs, capsys):
    dest, (first, second) = two_runs
    (dest / second / "results" / "summary.csv").write_text("not,a,summary\n")
    assert main(["history", "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert f"skipped {second}:" in out and first in out


def test_no_runs_is_one_line_and_exit_0(bench_env, tmp_path, capsys):
    assert main(["history", "--dest", str(tmp_path / "nothing-here")]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().count("\n") == 0
    assert captured.out.startswith("bench history: no fetched runs to show in")


def test_unknown_commits_follow_the_ordered_ones_by_run_time():
    def run(run_id, commit):
        return HistoryRun(
            run_id, "complete", "flash", "L4", commit, "-", {"c": HistoryPoint(1, None)}
        )

    runs = [run("20260102-000000-aaaaaa", "b"), run("20260101-000000-bbbbbb", None)]
    runs += [run("20260103-000000-cccccc", "a"), run("20260104-000000-dddddd", "gone")]
    history = ordered_history(("flash", "L4"), runs, {"a": 0, "b": 1})
    assert [r.commit for r in history.runs] == ["a", "b", None, "gone"]
    assert (history.order, history.not_in_history) == ("commit", 2)
    assert ordered_history(("flash", "L4"), runs, {}).order == "run time"
