"""A newcomer's first hour: the README's commands, --help, hints that work in a new shell,
errors that are one line and the right exit code, durations that read as a clock does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import COMMANDS, main
from orchestrator.cli.options import bench_command, parse_duration

REPO = Path(__file__).resolve().parents[2]


def readme_quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_the_quick_start_says_how_bench_gets_on_path_and_uses_real_commands():
    commands = readme_quick_start()
    assert commands[0] == "make demo"
    # bench is not on PATH after `make demo`: the next line must put it there.
    assert commands[1] == ". .venv/bin/activate"
    assert (REPO / "Makefile").read_text().count("\nVENV ?= .venv") == 1
    targets = re.findall(r"^([a-z-]+):", (REPO / "Makefile").read_text(), re.M)
    for command in commands:
        words = command.split()
        if words[0] == "make":
            assert words[1] in targets, command
        elif words[0] == "bench":
            assert words[1] in COMMANDS or words[1] == "--help", command


def test_every_bench_command_the_readme_shows_takes_the_options_it_shows():
    """Each `bench COMMAND --option` in the README (code spans and blocks) is a command and
    its options are ones that command takes, as `bench COMMAND --help` lists them."""
    import importlib

    text = (REPO / "README.md").read_text()
    fenced = re.findall(r"^```.*?\n(.*?)^```", text, re.M | re.S)
    indented = re.findall(r"^    (bench .*)$", text, re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    code = "\n".join([*fenced, *indented, *spans])
    shown = re.findall(r"(?<![\w/.-])bench ([a-z][a-z-]*)([^\n#]*)", code)
    assert len(shown) > 20
    for name, rest in shown:
        assert name in COMMANDS, name
        command = getattr(
            importlib.import_module(f"orchestrator.cli.{COMMANDS[name]}"), COMMANDS[name]
        )
        takes = {opt for param in command.params for opt in param.opts + param.secondary_opts}
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            assert option in takes | {"--help"}, f"bench {name}{rest}"


def test_the_readme_names_the_staging_folder_fetch_writes_through():
    from orchestrator.boundary import STAGING_PREFIX

    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"`results/{STAGING_PREFIX}<run id>-<random>/`" in readme


def test_no_file_points_outside_the_repository():
    pattern = re.compile(r"\.\./shared|/work/|/home/[a-z]")
    docs = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "Makefile"]
    docs += [p for p in (REPO / "orchestrator").rglob("*.py")]
    offenders = [str(p.relative_to(REPO)) for p in docs if pattern.search(p.read_text())]
    assert offenders == []
    assert "## A run's lifecycle" in (REPO / "ARCHITECTURE.md").read_text()


def test_help_lists_every_exit_code(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Exit codes:" in out
    for code in ("0", "1", "2", "3", "4", "5", "6", "7", "8", "130"):
        assert re.search(rf"^\s+{code}\s+\S", out, re.M), code


def test_hints_name_a_command_a_new_shell_can_run(tmp_path, monkeypatch):
    venv_bench = tmp_path / ".venv" / "bin" / "bench"
    venv_bench.parent.mkdir(parents=True)
    venv_bench.write_text("#!/bin/sh\n")
    venv_bench.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(venv_bench), "launch"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a new shell: the venv is not activated
    assert bench_command() == ".venv/bin/bench"
    monkeypatch.setenv("PATH", f"{venv_bench.parent}:/usr/bin:/bin")  # activated
    assert bench_command() == "bench"


@pytest.mark.parametrize(
    "text, seconds",
    [("45s", 45), ("10m", 600), ("1h", 3600), ("1h30m", 5400), ("1h30", 5400), ("2m30", 150)],
)
def test_durations_read_as_a_clock_does(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["45", "1m1h", "1.5h", "", "1h 30m", "30m1h", "h"])
def test_durations_without_a_clear_reading_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_bare_max_runtime_is_exit_2_saying_a_unit_is_needed(bench_env, capsys):
    assert main(["launch", "--budget", "1", "--max-runtime", "45"]) == 2
    assert "give a unit" in capsys.readouterr().err
    assert not (bench_env / "state").exists()


def test_a_non_utf8_bench_toml_is_one_line_exit_2(bench_env, capsys):
    (bench_env / "work" / "bench.toml").write_bytes(b'project = "caf\xe9-project"\n')
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and err.count("\n") == 1 and "a bug" not in err


def test_an_unwritable_dest_is_one_line_exit_2(bench_env, capsys):
    assert main(["fetch", "--dest", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert "--dest /proc/x is not a writable directory" in err and "a bug" not in err


@pytest.mark.slow
@pytest.mark.parametrize("args", [["prices"], ["prices", "--json"], ["--help"], ["render"]])
def test_a_reader_leaving_the_pipe_early_is_exit_0(bench_env, args):
    entry = "from orchestrator.cli import entry; entry()"
    argv = " ".join([sys.executable, "-c", f"'{entry}'", *args])
    done = subprocess.run(
        ["bash", "-c", f"{argv} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.stdout.strip() == "0", done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr


def test_prices_json_is_one_document_on_stdout_with_the_total_rate(bench_env, capsys):
    assert main(["prices", "--json", "--zones", "us-central1-b"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["region"] == "us-central1"
    assert document["rate_usd_per_hour"] == pytest.approx(sum(document["rate_items"].values()))
    assert document["seconds_one_dollar_buys"] > 3600
    assert document["launch_estimate_usd"] > 0
