"""bench runs git on a user's repository (its files, its commit, a --baseline revision) and
git runs none of the programs the repository's configuration names: no fsmonitor command,
no hook, no filter driver, no transport of a partial clone's lazy fetch
(orchestrator/kernel_tree/git.py, GIT_NO_PROGRAMS). Each program here writes a line to a marks file;
the test then shows that plain git, without bench's switches, does run them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.cli import main
from tests.e2e.test_user_kernel import git
from tests.unit.test_kernel_contract import kernel_tree

HOOKS = ("post-index-change", "post-checkout", "pre-commit", "post-commit", "reference-transaction")


def marking(marks: Path, what: str) -> str:
    return f"echo {what} >> {marks}"


def hostile_repository(root: Path) -> tuple[Path, Path]:
    """A kernel repository with two commits whose configuration, set after them, runs a
    program at each chance git gives: core.fsmonitor, every hook, a filter driver's clean
    and smudge commands on its .py files, a process filter on another file."""
    repo, marks = kernel_tree(root / "repo"), root / "marks"
    (repo / ".gitattributes").write_text("*.py filter=evil\nnotes.txt filter=proc\n")
    notes = repo / "notes.txt"
    notes.write_text("notes\n")
    os.utime(notes, (notes.stat().st_atime - 100, notes.stat().st_mtime - 100))  # not racy
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    with (repo / "mine" / "ops.py").open("a") as ops:
        ops.write("# faster\n")
    git(repo, "commit", "-qam", "second")
    settings = {
        "core.fsmonitor": marking(marks, "fsmonitor"),
        "filter.evil.clean": marking(marks, "clean") + "; cat",
        "filter.evil.smudge": marking(marks, "smudge") + "; cat",
        "filter.proc.process": marking(marks, "process"),
    }
    for key, value in settings.items():
        git(repo, "config", key, value)
    for hook in HOOKS:
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\n{marking(marks, hook)}\n")
        path.chmod(0o755)
    return repo, marks


def stat_dirty(repo: Path) -> None:
    """Newer times than the index holds: status must read the .py files again, through the
    clean filter (not notes.txt: a process filter that does not answer makes git stop)."""
    for path in repo.rglob("*.py"):
        os.utime(path, (path.stat().st_atime + 10, path.stat().st_mtime + 10))


def ran(marks: Path) -> set[str]:
    return {line.split()[0] for line in marks.read_text().splitlines()}


def test_render_and_launch_run_none_of_the_repositorys_programs(bench_env, capsys):
    repo, marks = hostile_repository(bench_env)
    stat_dirty(repo)
    render = ["render", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(repo)]
    assert main(render) == 0
    assert not marks.exists(), ran(marks)  # ls-files, check-ignore, status
    # Reads the working tree and HEAD~1 (git archive), then refuses the time cap: exit 2,
    # nothing created.
    launch = ["launch", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(repo)]
    code = main([*launch, "--baseline", "HEAD~1", "--max-runtime", "1s", "--budget", "1"])
    assert not marks.exists(), ran(marks)
    assert code == 2 and "more than the local time cap" in capsys.readouterr().err

    # The same reads by plain git run them all.
    stat_dirty(repo)
    for args in (["status", "--porcelain"], ["archive", "--format=tar", "HEAD~1"]):
        subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    assert {"fsmonitor", "clean", "post-index-change", "smudge", "process"} <= ran(marks)


def test_a_partial_clones_missing_objects_are_not_fetched_through_its_transport(bench_env, capsys):
    """A blobless clone lacks HEAD~1's version of ops.py: reading that revision would fetch
    it through remote.origin.uploadpack, a command of the repository's choosing. bench
    refuses the revision instead, and the command never runs."""
    source = kernel_tree(bench_env / "source")
    git(source, "init", "-q")
    git(source, "config", "uploadpack.allowFilter", "true")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "first")
    with (source / "mine" / "ops.py").open("a") as ops:
        ops.write("# faster\n")
    git(source, "commit", "-qam", "second")
    clone, marks = bench_env / "clone", bench_env / "marks"
    url = source.as_uri()
    git(
        bench_env,
        "-c",
        "protocol.file.allow=always",
        "clone",
        "-q",
        "--filter=blob:none",
        url,
        str(clone),
    )
    uploadpack = f"{marking(marks, 'uploadpack')}; git-upload-pack"
    git(clone, "config", "remote.origin.uploadpack", uploadpack)
    git(clone, "config", "protocol.file.allow", "always")

    launch = ["launch", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(clone)]
    code = main([*launch, "--baseline", "HEAD~1", "--budget", "1"])
    assert not marks.exists()
    assert code == 2 and "git archive failed" in capsys.readouterr().err
    assert not (bench_env / "state" / "runs.sqlite").exists()

    subprocess.run(["git", "-C", str(clone), "archive", "HEAD~1"], capture_output=True, check=False)
    assert marks.read_text().split() == ["uploadpack"]  # plain git fetches through it


def test_a_filter_driver_bench_cannot_name_on_gits_command_line_stops_git(bench_env, capsys):
    """`-c filter.a=b.smudge=` would set another key: git is not run on such a repository
    at all. Its working tree is read as a plain directory; a revision of it is refused."""
    repo, marks = hostile_repository(bench_env)
    (repo / ".gitattributes").write_text("*.py filter=a=b\n")
    git(repo, "config", "filter.a=b.clean", marking(marks, "clean") + "; cat")
    git(repo, "config", "filter.a=b.smudge", marking(marks, "smudge") + "; cat")
    stat_dirty(repo)
    render = ["render", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(repo)]
    assert main(render) == 0
    launch = ["launch", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(repo)]
    assert main([*launch, "--baseline", "HEAD~1", "--budget", "1"]) == 2
    assert "names a filter 'a=b', which bench cannot switch off" in capsys.readouterr().err
    assert not marks.exists()
