"""Every line bench prints for a person fits an 80-column terminal, or breaks at a space
(issue 52): each command's --help, and what each prints around a real local A/B run, its
fetch, report and gate. A line over 80 columns is allowed only when it is one word (a path
or a run id longer than the terminal, kept whole for copy and paste). Machine-readable
output is the exception by design: `--json`, `render`'s script, `report --format markdown`,
`logs` (the run's own log, verbatim)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.cli import COMMANDS, main
from tests.e2e.test_gce_cli import plan_file

pytestmark = pytest.mark.timeout(300)

WIDTH = 80


def too_long(text: str) -> list[str]:
    """Lines over WIDTH that hold more than one word: a terminal breaks them mid-word."""
    return [line for line in text.splitlines() if len(line) > WIDTH and " " in line.strip()]


def printed(capsys, args: list[str], codes=(0,)) -> str:
    code = main(args)
    out, err = capsys.readouterr()
    assert code in codes, (args, code, out, err)
    return out + err


@pytest.fixture
def eighty(bench_env, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the local run inherits it (test_gate.py)
    return bench_env


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_fits_eighty_columns(eighty, capsys, command):
    args = [command, "--help"] if command else ["--help"]
    assert too_long(printed(capsys, args)) == []


def test_what_a_first_hour_prints_fits_eighty_columns(
    eighty, tmp_path, capsys, gated_slower_run, two_local_runs
):
    """What a first hour prints around real local runs, each launched at 80 columns: an A/B
    run gated at a margin and a `launch --wait --fetch` (the session's runs,
    tests/e2e/conftest.py), then every command after them, in a copy of the gated run's
    state, its results beside the two fetched runs'."""
    plan = plan_file(tmp_path, 20)
    dest = tmp_path / "results"
    shutil.copytree(Path(gated_slower_run["run_dir"]).parent, dest)
    shutil.copytree(two_local_runs["dest"], dest, dirs_exist_ok=True)
    shutil.copytree(Path(gated_slower_run["root"]) / "state", eighty / "state", symlinks=True)
    run_id = gated_slower_run["run_id"]
    outputs = {
        "launch": gated_slower_run["launch_printed"],
        "launch --fetch": two_local_runs["launch_printed"] + two_local_runs["launch_err"],
    }
    assert run_id == launched_run_id_from(outputs["launch"])
    for args in (
        ["status"],
        ["status", run_id],
        ["fetch", run_id, "--dest", str(dest)],
        ["report", run_id, "--dest", str(dest)],
        ["history", "--dest", str(dest)],
        ["prices"],
        ["clean", "--dry-run"],
        ["stop-all", "--dry-run"],
        ["doctor"],
        ["setup"],
        ["launch", "--budget", "1", "--plan", plan],
        ["fetch", "20261122-081500-a1b2c3"],
    ):
        outputs[" ".join(args)] = printed(capsys, args, codes=(0, 2, 4, 5, 6, 7))
    # render's stdout is the script: its notes on stderr are for a person.
    assert main(["render", "--backend", "local", "--plan", plan]) == 0
    outputs["render"] = capsys.readouterr().err
    long_lines = {name: too_long(text) for name, text in outputs.items()}
    assert {name: lines for name, lines in long_lines.items() if lines} == {}


def launched_run_id_from(text: str) -> str:
    return text.split("bench: launched run ", 1)[1].split()[0]
