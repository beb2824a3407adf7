"""A user's kernel repository (`bench launch --kernel DIR`): its tree, its contract, its
identity, read on the laptop and checked before anything is created.

`read_candidate` reads, top to bottom: the tree as git sees it (`collect.collect_tree`), its
contract from the collected files (`contract.parse_contract`), the plan of its own the
contract may name (the candidate's only: a --baseline revision is timed on the candidate's
shapes), and its identity (the files' digest, the commit it sits on: `git.working_state`).
`read_baseline` reads a `--baseline REF` the same way, as a directory or as a git revision
of the same repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.collect import TreeFiles, collect_tree, tree_sha256
from orchestrator.kernel_tree.contract import own_plan, parse_contract
from orchestrator.kernel_tree.git import resolve_commit, working_state
from results_schema.kernel_contract import (
    CONTRACT_FILE,
    MAX_VARIANTS,
    KernelIdentity,
    UserKernel,
)
from results_schema.models import BASELINE_SUFFIX, Plan

# The trees' folders in the payload, beside benches/ and kernels/.
CANDIDATE_DIR = "user_kernel"
BASELINE_DIR = "user_kernel_baseline"
# A variant's own copy of the tree, and a --candidates revision's: the prefix and a letter
# per place (a, b, ...), so a folder (and the user it is confined as) stays lowercase.
VARIANT_DIR = "user_kernel_variant_"
REVISION_DIR = "user_kernel_revision_"
MAX_CANDIDATE_REVISIONS = MAX_VARIANTS


@dataclass(frozen=True)
class KernelTree:
    """A kernel tree's files (names relative to its root), the kernel as plans carry it, and
    the plan of its own its contract names (read for the candidate only)."""

    files: TreeFiles
    kernel: UserKernel
    plan: Plan | None = None


def default_kernel_dir(cwd: Path) -> Path | None:
    """The current directory when it holds a contract: `bench launch` there means it."""
    return cwd if (cwd / CONTRACT_FILE).is_file() else None


def read_candidate(root: Path) -> KernelTree:
    """The working tree at `root` (uncommitted edits included), timed as its declared name."""
    root = _existing_dir(root, "--kernel")
    label = f"--kernel {root}"
    files = collect_tree(root, label=label)
    contract = parse_contract(files, label)
    source = KernelIdentity(tree_sha256=tree_sha256(files), **working_state(root))
    kernel = UserKernel(
        identity=contract.name, directory=CANDIDATE_DIR, contract=contract, source=source
    )
    return KernelTree(files, kernel, own_plan(files, contract, label))


def variant_trees(candidate: KernelTree) -> list[KernelTree]:
    """The candidate as the run times it: one tree per declared variant, timed as
    '<name>[<variant>]' (in declaration order), or the candidate alone when it declares none.
    A variant builds in its own copy of the tree with its env (its build may read it), unless
    the contract says build_shared: then every variant runs the candidate folder's one build,
    its env set for its worker only."""
    contract = candidate.kernel.contract
    if not contract.variants:
        return [candidate]
    trees = []
    for index, name in enumerate(contract.variants):
        variant, worker_env = contract.variant(name)
        directory = CANDIDATE_DIR if contract.build_shared else VARIANT_DIR + _letters(index)
        kernel = candidate.kernel.model_copy(
            update={
                "identity": f"{contract.name}[{name}]",
                "directory": directory,
                "contract": variant,
                "worker_env": worker_env,
            }
        )
        trees.append(KernelTree(candidate.files, kernel, candidate.plan))
    return trees


def read_revision(root: Path, ref: str, index: int, candidate: UserKernel) -> KernelTree:
    """REF (`--candidates REF,...`) as a further candidate: a git revision of the repository
    at `root`, or a directory holding a kernel tree, timed as '<name>@<commit 7>' (a
    directory's: '<name>@tree-<sha 7>') under its own contract, its variants not expanded."""
    path = Path(ref).expanduser()
    if path.is_dir():
        label = f"--candidates {ref}"
        files = collect_tree(path.resolve(), label=label)
        identity = KernelIdentity(tree_sha256=tree_sha256(files), **working_state(path.resolve()))
        short = f"tree-{identity.tree_sha256[:7]}"
    else:
        commit = resolve_commit(root, ref)
        label = f"--candidates {ref} (commit {commit[:12]})"
        files = collect_tree(root, revision=commit, label=label)
        identity = KernelIdentity(tree_sha256=tree_sha256(files), commit=commit)
        short = commit[:7]
    contract = parse_contract(files, label).model_copy(update={"variants": {}})
    kernel = UserKernel(
        identity=f"{candidate.contract.name}@{short}",
        directory=REVISION_DIR + _letters(index),
        contract=contract,
        source=identity,
    )
    return KernelTree(files, kernel)


def _letters(index: int) -> str:
    """a, b, ..., z, ba, bb, ...: a place as lowercase letters (a folder's suffix)."""
    text = ""
    while True:
        text = chr(ord("a") + index % 26) + text
        index //= 26
        if index == 0:
            return text


def read_baseline(root: Path, ref: str, candidate: UserKernel) -> tuple[KernelTree, str]:
    """REF as the A/B baseline: a directory holding a kernel tree, else a git revision of
    the repository at `root`. Returns the tree, timed as '<candidate's name>@baseline', and
    its Comparison source ('tree' or 'git')."""
    path = Path(ref).expanduser()
    if path.is_dir():
        label, source = f"--baseline {ref}", "tree"
        files = collect_tree(path.resolve(), label=label)
        identity = KernelIdentity(tree_sha256=tree_sha256(files), **working_state(path.resolve()))
    else:
        commit = resolve_commit(root, ref)
        label, source = f"--baseline {ref} (commit {commit[:12]})", "git"
        files = collect_tree(root, revision=commit, label=label)
        identity = KernelIdentity(tree_sha256=tree_sha256(files), commit=commit)
    contract = parse_contract(files, label)
    kernel = UserKernel(
        identity=candidate.identity + BASELINE_SUFFIX,
        directory=BASELINE_DIR,
        contract=contract,
        source=identity,
    )
    return KernelTree(files, kernel), source


def _existing_dir(root: Path, option: str) -> Path:
    if not root.is_dir():
        raise UsageError(f"{option} {root}: no such directory")
    return root.resolve()
