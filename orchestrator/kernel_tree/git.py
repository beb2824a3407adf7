"""git, run on a user's repository without running anything its configuration names.

Every read bench makes of a repository (its file list, a revision's archive, the commit a
tree sits on, whether it is dirty) goes through `run_git` or `start_git`: bounded in time,
each program a repository's configuration could make git run switched off on its command
line, a failure a UsageError with git's last line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import UsageError

GIT_TIMEOUT_SECONDS = 60


def resolve_commit(repo: Path, revision: str) -> str:
    """The full commit id `revision` names in the repository holding `repo`."""
    commit = run_git(repo, "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}")
    return commit.decode().strip()


def working_state(root: Path) -> dict:
    """The commit a working tree sits on and whether it differs from it; {} outside git or
    before a first commit."""
    try:
        commit = run_git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except UsageError:
        return {}
    status = run_git(root, "status", "--porcelain", "--untracked-files=normal", "--", ".")
    return {"commit": commit.decode().strip(), "dirty": bool(status.strip())}


def repository_root(start: Path) -> Path | None:
    """The git work tree holding `start`, or None when it is not in one."""
    try:
        top = run_git(start, "rev-parse", "--show-toplevel").decode().strip()
    except UsageError:
        return None
    return Path(top)


def run_git(repo: Path, *args: str) -> bytes:
    """git's output, or a UsageError with its last line of error."""
    proc = git_process(repo, *args)
    if proc.returncode != 0:
        raise UsageError(f"git {args[0]} failed: {last_line(proc.stderr, proc.returncode)}")
    return proc.stdout


def git_process(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return _run_bounded(_git_command(repo, *args), args[0])


def _run_bounded(command: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            command, capture_output=True, timeout=GIT_TIMEOUT_SECONDS, env=_git_env(), check=False
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {what} took over {GIT_TIMEOUT_SECONDS} s") from None


def start_git(repo: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        _git_command(repo, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_git_env()
    )


# What a repository's configuration can make git run during the reads bench makes (git
# 2.39, measured): core.fsmonitor's command on ls-files, check-ignore and status; status
# rewrites the index, which runs the post-index-change hook; a filter driver's clean
# command on status, its smudge or process command on archive; and in a partial clone a
# missing object is fetched, through a transport that runs commands of its own
# (remote.<name>.uploadpack, core.sshCommand, ext::). Each is switched off on git's command
# line, which outranks every configuration file: filter drivers and protocols by the names
# the configuration gives them. Nothing else runs: no pager (the output is a pipe), no diff
# driver (bench runs no diff), no network but that fetch.
GIT_NO_PROGRAMS = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "protocol.allow=never")
FILTER_COMMANDS = ("clean", "smudge", "process")


def _git_command(repo: Path, *args: str) -> list[str]:
    if shutil.which("git") is None:
        raise UsageError("this needs git on this machine, and git is not installed")
    git = ["git", "-C", str(repo), *_config_flags(GIT_NO_PROGRAMS)]
    return [*git, *_config_flags(_declared_programs_off(git, repo)), *args]


def _config_flags(settings: Sequence[str]) -> list[str]:
    return [flag for setting in settings for flag in ("-c", setting)]


def _declared_programs_off(git: list[str], repo: Path) -> list[str]:
    """Settings that switch off every filter driver the configuration declares (its clean,
    smudge and process commands, and `required`: a file is read as committed) and every
    protocol it allows by name. Reading the configuration runs nothing."""
    listing = _run_bounded(
        [*git, "config", "-z", "--get-regexp", r"^(filter|protocol)\."], "config"
    )
    settings: dict[str, None] = {}  # ordered and unique
    for entry in filter(None, listing.stdout.split(b"\0")):
        section, _, rest = os.fsdecode(entry.split(b"\n", 1)[0]).partition(".")
        name = rest.rpartition(".")[0]
        # `-c filter.a=b.smudge=` would set another key: git is not run on this repository
        # (where a caller takes "no git" for a plain directory, it is read as one).
        if "=" in name:
            raise UsageError(
                f"{repo}: its git configuration names a {section} {name!r}, which bench "
                "cannot switch off on git's command line: rename it"
            )
        if name and section == "filter":
            settings.update(dict.fromkeys(f"filter.{name}.{c}=" for c in FILTER_COMMANDS))
            settings[f"filter.{name}.required=false"] = None
        elif name and section == "protocol":
            settings[f"protocol.{name}.allow=never"] = None
    return list(settings)


def _git_env() -> dict[str, str]:
    # Newer gits' own switch for the lazy fetch (protocol.allow=never stops older ones).
    return {**os.environ, "GIT_NO_LAZY_FETCH": "1"}


def last_line(stderr: bytes, returncode: int) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {returncode}"
