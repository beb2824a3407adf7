"""The A/B baseline's kernels/ tree: a git revision of this repository or a directory.

`bench launch --baseline REF` times our kernel as the working tree has it (uncommitted
edits included: the candidate is always what the payload carries) against the kernels/
tree of REF. REF is first looked for as a directory (a kernels/ tree, or a checkout
holding one), then resolved by git in the repository the controller runs from: its
kernels/ at that commit comes from `git archive`, so neither the working tree nor the
index is touched. The tree travels in the payload as baseline/kernels/.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from results_schema import Comparison
from results_schema.models import BASELINE_SUFFIX

KERNEL_PACKAGE = "kernels"
GIT_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class BaselineTree:
    """A kernels/ tree's files (names relative to kernels/) and how it was named."""

    files: tuple[tuple[str, bytes], ...]
    comparison: Comparison


def _git(repo: Path, *args: str) -> bytes:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        raise UsageError("--baseline with a git revision needs git on this machine") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {args[0]} took over {GIT_TIMEOUT_SECONDS} s") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {args[0]} failed: {message[-1] if message else proc.returncode}")
    return proc.stdout


def repository_root(start: Path) -> Path | None:
    """The git work tree holding `start`, or None when it is not in one."""
    try:
        top = _git(start, "rev-parse", "--show-toplevel").decode().strip()
    except UsageError:
        return None
    return Path(top)


def kernels_dir_of(path: Path) -> Path | None:
    """`path` itself when it is a kernels/ tree, its kernels/ when it is a checkout."""
    for candidate in (path, path / KERNEL_PACKAGE):
        if (candidate / "flash_attention" / "build.py").is_file():
            return candidate
    return None


def from_directory(ref: str, kernels: Path, skipped) -> BaselineTree:
    files = []
    for path in sorted(kernels.rglob("*")):
        relative = path.relative_to(kernels)
        if path.is_file() and not path.is_symlink() and not skipped(relative):
            files.append((relative.as_posix(), path.read_bytes()))
    comparison = Comparison(baseline="", source="tree", ref=ref)
    return BaselineTree(tuple(files), comparison)


def from_git(ref: str, repo: Path, skipped) -> BaselineTree:
    commit = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    commit = commit.decode().strip()
    archive = _git(repo, "archive", "--format=tar", commit, "--", KERNEL_PACKAGE)
    files = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(KERNEL_PACKAGE + "/"):
                continue
            relative = Path(member.name).relative_to(KERNEL_PACKAGE)
            if ".." in relative.parts or skipped(relative):
                continue
            extracted = tar.extractfile(member)
            files.append((relative.as_posix(), extracted.read() if extracted else b""))
    if not any(name == "flash_attention/build.py" for name, _ in files):
        raise UsageError(f"--baseline {ref}: commit {commit[:12]} has no kernels/flash_attention")
    dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=normal").strip())
    comparison = Comparison(
        baseline="", source="git", ref=ref, commit=commit, candidate_dirty=dirty
    )
    return BaselineTree(tuple(sorted(files)), comparison)


def resolve_baseline(ref: str, candidate: str, repo: Path | None, skipped) -> BaselineTree:
    """The tree REF names, timed as '<candidate>@baseline'. `skipped(relative path)` says
    which files the payload leaves out (the same rule as for the candidate's tree)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        kernels = kernels_dir_of(path)
        if kernels is None:
            raise UsageError(f"--baseline {ref}: no kernels/flash_attention/build.py under it")
        tree = from_directory(str(path.resolve()), kernels, skipped)
    elif repo is None:
        raise UsageError(
            f"--baseline {ref}: not a directory, and bench does not run from a git checkout "
            "to resolve it as a revision"
        )
    else:
        tree = from_git(ref, repo, skipped)
    comparison = tree.comparison.model_copy(update={"baseline": candidate + BASELINE_SUFFIX})
    return BaselineTree(tree.files, comparison)
