"""The A/B baseline's kernels/ tree: a git revision of this repository or a directory.

`bench launch --baseline REF` times our kernel as the working tree has it (uncommitted
edits included: the candidate is always what the payload carries) against the kernels/
tree of REF. REF is first looked for as a directory (a kernels/ tree, or a checkout
holding one), then resolved by git in the repository the controller runs from: its
kernels/ at that commit comes from `git archive`, so neither the working tree nor the
index is touched. Either way the tree is read by the payload's `collect_tree`, under the
candidate's rules (as git sees it, no link, bounded: orchestrator/payload.py), and travels
in the payload as baseline/kernels/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.kernel_repo import tree_sha256, working_state
from orchestrator.payload import TreeFiles, collect_tree, resolve_commit, run_git
from results_schema import Comparison
from results_schema.kernel_contract import KernelIdentity
from results_schema.models import BASELINE_SUFFIX

KERNEL_PACKAGE = "kernels"
OUR_KERNEL_BUILD = "flash_attention/build.py"  # what makes a kernels/ tree ours

# `skipped(path relative to kernels/)`: the files the payload leaves out.
Skipped = Callable[[Path], bool]


@dataclass(frozen=True)
class BaselineTree:
    """A kernels/ tree's files (names relative to kernels/) and how it was named."""

    files: TreeFiles
    comparison: Comparison


def repository_root(start: Path) -> Path | None:
    """The git work tree holding `start`, or None when it is not in one."""
    try:
        top = run_git(start, "rev-parse", "--show-toplevel").decode().strip()
    except UsageError:
        return None
    return Path(top)


def kernels_tree_of(path: Path) -> tuple[Path, tuple[str, ...]] | None:
    """(root, parts) of the kernels/ tree at `path`: (path, ()) when `path` is one, (path,
    ("kernels",)) when it is a checkout holding one. Found through links, so that a linked
    kernels/ or build.py is then refused by name, never taken for a missing tree."""
    if (path / OUR_KERNEL_BUILD).exists():
        return path, ()
    if (path / KERNEL_PACKAGE / OUR_KERNEL_BUILD).exists():
        return path, (KERNEL_PACKAGE,)
    return None


def kernels_files(
    root: Path, parts: tuple[str, ...], revision: str | None, skipped: Skipped, label: str
) -> TreeFiles:
    """The kernels/ tree's files, names relative to kernels/; refused unless it is ours."""
    prefix = "".join(f"{part}/" for part in parts)
    files = collect_tree(
        root,
        parts,
        revision=revision,
        skipped=lambda name: skipped(Path(name.removeprefix(prefix))),
        label=label,
    )
    kernels = tuple((name.removeprefix(prefix), data) for name, data in files)
    if not any(name == OUR_KERNEL_BUILD for name, _ in kernels):
        raise UsageError(f"{label}: no kernels/{OUR_KERNEL_BUILD} in it")
    return kernels


def from_directory(ref: str, path: Path, skipped: Skipped) -> BaselineTree:
    found = kernels_tree_of(path)
    if found is None:
        raise UsageError(f"--baseline {ref}: no kernels/{OUR_KERNEL_BUILD} under it")
    files = kernels_files(*found, None, skipped, f"--baseline {ref}")
    return BaselineTree(files, Comparison(baseline="", source="tree", ref=ref))


def from_git(ref: str, repo: Path, skipped: Skipped) -> BaselineTree:
    commit = resolve_commit(repo, ref)
    label = f"--baseline {ref} (commit {commit[:12]})"
    files = kernels_files(repo, (KERNEL_PACKAGE,), commit, skipped, label)
    dirty = bool(run_git(repo, "status", "--porcelain", "--untracked-files=normal").strip())
    comparison = Comparison(
        baseline="", source="git", ref=ref, commit=commit, candidate_dirty=dirty
    )
    return BaselineTree(files, comparison)


def resolve_baseline(ref: str, candidate: str, repo: Path | None, skipped: Skipped) -> BaselineTree:
    """The tree REF names, timed as '<candidate>@baseline'. `skipped(relative path)` says
    which files the payload leaves out (the same rule as for the candidate's tree)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        tree = from_directory(str(path.resolve()), path.resolve(), skipped)
    elif repo is None:
        raise UsageError(
            f"--baseline {ref}: not a directory, and bench does not run from a git checkout "
            "to resolve it as a revision"
        )
    else:
        tree = from_git(ref, repo, skipped)
    comparison = tree.comparison.model_copy(update={"baseline": candidate + BASELINE_SUFFIX})
    return BaselineTree(tree.files, comparison)


def candidate_files(kernels_dir: Path, skipped: Skipped) -> TreeFiles:
    """The kernels/ tree the payload carries as the candidate."""
    return kernels_files(kernels_dir, (), None, skipped, f"the candidate's tree {kernels_dir}")


def candidate_identity(kernels_dir: Path, files: TreeFiles) -> KernelIdentity:
    """The candidate tree's content hash, and the commit it sits on with +dirty for
    uncommitted changes under kernels/ only (an edit elsewhere does not change what is
    timed). `bench history` orders runs by it."""
    return KernelIdentity(tree_sha256=tree_sha256(files), **working_state(kernels_dir))


# What the baseline builds from its own tree; every other Python file of kernels/ (the
# binding api.py above all) is the candidate's on both sides of an A/B (kernels/baseline.py).
BASELINE_OWN_PYTHON = {"flash_attention/build.py", "flash_attention/generate.py"}


def shared_binding_edits(candidate: TreeFiles, baseline: TreeFiles) -> list[str]:
    """Python files of kernels/ that differ between the trees but that both sides of the
    A/B run from the candidate's tree: their edits are not compared."""
    ours, theirs = dict(candidate), dict(baseline)
    names = {n for n in ours.keys() | theirs.keys() if n.endswith(".py")} - BASELINE_OWN_PYTHON
    return sorted(n for n in names if ours.get(n) != theirs.get(n))


def shared_binding_note(edits: list[str]) -> str | None:
    if not edits:
        return None
    shown = ", ".join(f"kernels/{name}" for name in edits[:4])
    more = f" and {len(edits) - 4} more" if len(edits) > 4 else ""
    return (
        f"--baseline: {shown}{more} differ between the trees, but both sides run this "
        "tree's Python (the baseline's compiled kernel is called through it): the A/B "
        "compares the kernels' compiled code only, not those edits"
    )
