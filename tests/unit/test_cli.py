"""The command line: help everywhere, fast start, one-line errors with exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from orchestrator.cli import COMMANDS, cli, main


def test_every_command_has_help_with_an_example(capsys):
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, name
        assert command.help and "Example" in command.help, f"{name} needs a docstring with examples"
        assert main([name, "--help"]) == 0
        assert "Usage: bench " + name in capsys.readouterr().out


def test_help_imports_no_cloud_sdk_and_no_torch():
    probe = (
        "import sys; from orchestrator.cli import main; main(['--help']); "
        "heavy = [m for m in sys.modules if m.startswith(('google', 'torch', 'rich', 'pydantic'))];"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout


@pytest.mark.parametrize(
    "args, expected",
    [
        (["launch", "--budget", "0"], "positive"),
        (["launch", "--budget", "-1"], "positive"),
        (["launch", "--budget", "abc"], "not an amount"),
        (["launch", "--budget", "nan"], "positive"),
        (["launch", "--budget", "1", "--plan", "no-such-plan"], "unknown plan"),
        (["launch", "--budget", "1", "--backend", "azure"], "azure"),
        (["launch", "--budget", "1", "--max-runtime", "soon"], "not a duration"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bench_env, capsys, args, expected):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err
    assert len(err.splitlines()) == 1, err
    assert not (bench_env / "state").exists(), "a refused launch must write nothing"


@pytest.mark.parametrize(
    "toml, expected",
    [("budget = [\n", "not valid TOML"), ("colour = 'blue'\n", "unknown setting 'colour'")],
)
def test_bad_bench_toml_is_exit_2(bench_env, capsys, toml, expected):
    (bench_env / "work" / "bench.toml").write_text(toml)
    assert main(["launch", "--budget", "1", "--backend", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not (bench_env / "state").exists()


def test_unwritable_state_dir_is_exit_2(bench_env, capsys, monkeypatch):
    blocker = bench_env / "not-a-dir"
    blocker.write_text("a file where the state dir should go")
    monkeypatch.setenv("BENCH_STATE_DIR", str(blocker / "state"))
    assert main(["launch", "--budget", "1", "--backend", "local", "--plan", "cpu-smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not writable" in err and len(err.splitlines()) == 1
    assert blocker.read_text() == "a file where the state dir should go"


def test_gce_without_project_explains_what_to_set(bench_env, capsys):
    assert main(["launch", "--budget", "1", "--backend", "gce"]) == 2
    assert "project" in capsys.readouterr().err


def test_unexpected_errors_are_exit_1_with_a_hint(bench_env, capsys, monkeypatch):
    import orchestrator.service.launch as launch_service

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(launch_service, "launch", explode)
    assert main(["launch", "--budget", "1", "--backend", "local"]) == 1
    assert "BENCH_DEBUG=1" in capsys.readouterr().err
