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
        (["launch", "--backend", "local", "--budget", "1", "--plan", "no-plan"], "unknown plan"),
        (["launch", "--budget", "1", "--backend", "azure"], "azure"),
        (["launch", "--budget", "1", "--max-runtime", "soon"], "not a duration"),
        (["launch", "--budget", "1"], "--backend local"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bench_env, capsys, args, expected):
    before = files_under(bench_env)
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert expected in err
    assert_one_line(out, err)
    assert files_under(bench_env) == before, "a refused launch must write nothing"


def files_under(root) -> set:
    return {p.relative_to(root) for p in root.rglob("*")}


def assert_one_line(out: str, err: str) -> None:
    """The error and nothing else: no 'backend local: ...' line before it."""
    assert out == "", f"expected only the error line, stdout had: {out!r}"
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "toml, expected",
    [("budget = [\n", "not valid TOML"), ("colour = 'blue'\n", "unknown setting 'colour'")],
)
def test_bad_bench_toml_is_exit_2(bench_env, capsys, toml, expected):
    (bench_env / "work" / "bench.toml").write_text(toml)
    before = files_under(bench_env)
    assert main(["launch", "--budget", "1", "--backend", "local"]) == 2
    out, err = capsys.readouterr()
    assert expected in err
    assert_one_line(out, err)
    assert files_under(bench_env) == before


def test_unwritable_state_dir_is_exit_2(bench_env, capsys, monkeypatch):
    blocker = bench_env / "not-a-dir"
    blocker.write_text("a file where the state dir should go")
    monkeypatch.setenv("BENCH_STATE_DIR", str(blocker / "state"))
    before = files_under(bench_env)
    assert main(["launch", "--budget", "1", "--backend", "local", "--plan", "cpu-smoke"]) == 2
    out, err = capsys.readouterr()
    assert "not writable" in err
    assert_one_line(out, err)
    assert blocker.read_text() == "a file where the state dir should go"
    assert files_under(bench_env) == before


@pytest.mark.parametrize("toml", ["", 'project = "my-project-1"\n'])
def test_gce_without_project_explains_what_to_set(bench_env, capsys, toml):
    (bench_env / "work" / "bench.toml").write_text(toml)
    before = files_under(bench_env)
    assert main(["launch", "--budget", "1", "--backend", "gce"]) == 2
    out, err = capsys.readouterr()
    assert "bucket" in err and "bench.toml" in err
    assert_one_line(out, err)
    assert files_under(bench_env) == before, "a launch refused for missing settings wrote files"


def test_unexpected_errors_are_exit_1_with_a_hint(bench_env, capsys, monkeypatch):
    import orchestrator.service.launch as launch_service

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(launch_service, "launch", explode)
    assert main(["launch", "--budget", "1", "--backend", "local"]) == 1
    assert "BENCH_DEBUG=1" in capsys.readouterr().err
