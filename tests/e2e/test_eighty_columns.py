"""Every line bench prints for a person fits an 80-column terminal, or breaks at a space
(issue 52): each command's --help, and what each prints around a real local A/B run, its
fetch, report and gate. A line over 80 columns is allowed only when it is one word (a path
or a run id longer than the terminal, kept whole for copy and paste). Machine-readable
output is the exception by design: `--json`, `render`'s script, `report --format markdown`,
`logs` (the run's own log, verbatim)."""

from __future__ import annotations

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


def test_what_a_first_hour_prints_fits_eighty_columns(eighty, tmp_path, capsys):
    plan = plan_file(tmp_path, 20)
    dest = str(tmp_path / "results")
    launch = ["launch", "--backend", "local", "--budget", "1", "--plan", plan, "--wait"]
    ab = ["--candidate", "sdpa-math", "--baseline-impl", "sdpa", "--margin", "25%"]
    outputs = {}
    outputs["launch"] = printed(
        capsys, [*launch, *ab, "--fail-on", "slower", "--dest", dest], codes=(0, 6, 7)
    )
    run_id = launched_run_id_from(outputs["launch"])
    outputs["launch --fetch"] = printed(capsys, [*launch, "--fetch", "--dest", dest])
    for args in (
        ["status"],
        ["status", run_id],
        ["fetch", run_id, "--dest", dest],
        ["report", run_id, "--dest", dest],
        ["history", "--dest", dest],
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
