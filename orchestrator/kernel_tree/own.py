"""Our kernel (kernels/flash_attention) as a plan carries any kernel: declared by its
contract (kernels/bench-kernel.toml), shipped as a kernel tree of its own, built, gated and
timed on the path users' kernels take (benches/user_kernel.py, the startup script's
build_user_kernel). Nothing in the harness knows it by name.

Its tree on the target is a folder holding the kernels/ package, with the contract at the
folder's root as in a user's repository: flash_kernel/ for the working tree (uncommitted
edits included), baseline/ for `bench launch --baseline REF`. REF is first looked for as a
directory (a kernels/ tree, or a checkout holding one), then resolved by git in the
repository the controller runs from: its kernels/ at that commit comes from `git archive`,
so neither the working tree nor the index is touched. Either way the tree is read by the
same `collect_tree` (as git sees it, no link, bounded: kernel_tree/collect.py). A
revision older than the contract file, or whose contract this bench refuses, is timed under
the working tree's contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.collect import (
    TreeFiles,
    collect_tree,
    package_dir,
    skipped_in_kernels,
    tree_sha256,
)
from orchestrator.kernel_tree.contract import parse_contract, read_contract
from orchestrator.kernel_tree.git import repository_root, resolve_commit, run_git, working_state
from results_schema import Comparison, Plan
from results_schema.kernel_contract import CONTRACT_FILE, KernelIdentity, UserKernel
from results_schema.models import BASELINE_SUFFIX

KERNEL_PACKAGE = "kernels"
OUR_KERNEL_BUILD = "flash_attention/build.py"  # what makes a kernels/ tree ours
# The trees' folders in the payload (a user's are user_kernel/ and user_kernel_baseline/).
CANDIDATE_DIR = "flash_kernel"
BASELINE_DIR = "baseline"

# `skipped(path relative to kernels/)`: the files the payload leaves out.
Skipped = Callable[[Path], bool]


@dataclass(frozen=True)
class BaselineTree:
    """A kernels/ tree's files (names relative to kernels/) and how it was named."""

    files: TreeFiles
    comparison: Comparison


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


@dataclass(frozen=True)
class OwnKernel:
    """Our kernel's trees for a plan: as plans carry kernels (candidate first), their
    folders' files for the payload, and the A/B comparison when a baseline was named."""

    kernels: tuple[UserKernel, ...]
    trees: tuple[tuple[str, TreeFiles], ...]
    comparison: Comparison | None
    source: KernelIdentity  # the working tree's: `bench history` orders runs by it


def own_kernel(name: str, baseline_ref: str | None, repo: Path | None = None) -> OwnKernel:
    """Our kernel, timed as `name` (its contract's name: the plan names it so), and its
    `baseline_ref` tree as '<name>@baseline' when given. `repo` holds the kernels/ tree
    (default: the one bench runs from) and resolves the baseline's revision."""
    kernels_dir = repo / KERNEL_PACKAGE if repo else package_dir(KERNEL_PACKAGE)
    files = candidate_files(kernels_dir, skipped_in_kernels)
    source = candidate_identity(kernels_dir, files)
    tree = as_kernel_tree(files)
    candidate = _declared(tree, name, CANDIDATE_DIR, source, "our kernel (kernels/)", None)
    kernels, trees, comparison = [candidate], [(CANDIDATE_DIR, tree)], None
    if baseline_ref:
        repo = repo or repository_root(kernels_dir.parent)
        found = resolve_baseline(baseline_ref, name, repo, skipped_in_kernels)
        base_tree = as_kernel_tree(found.files)
        identity = KernelIdentity(
            tree_sha256=tree_sha256(found.files), commit=found.comparison.commit
        )
        label = f"--baseline {baseline_ref}"
        kernels.append(
            _declared(base_tree, name + BASELINE_SUFFIX, BASELINE_DIR, identity, label, candidate)
        )
        trees.append((BASELINE_DIR, base_tree))
        comparison = found.comparison
    return OwnKernel(tuple(kernels), tuple(trees), comparison, source)


def as_kernel_tree(kernels_files: TreeFiles) -> TreeFiles:
    """A kernels/ tree's files (names relative to kernels/) as a kernel tree: under
    kernels/, with its contract also at the tree's root, where every tree has it."""
    files = [(f"{KERNEL_PACKAGE}/{name}", data) for name, data in kernels_files]
    contract = dict(kernels_files).get(CONTRACT_FILE)
    if contract is not None:
        files.append((CONTRACT_FILE, contract))
    return tuple(sorted(files))


def _declared(
    tree: TreeFiles,
    identity: str,
    directory: str,
    source: KernelIdentity,
    label: str,
    candidate: UserKernel | None,
) -> UserKernel:
    """The tree as a plan carries it, under its own contract; a baseline revision from
    before the contract file, or whose contract this bench refuses (one from before BENCH_*
    was reserved set BENCH_KERNEL_CACHE), under the candidate's."""
    if candidate is None:
        contract = parse_contract(tree, label)
    elif CONTRACT_FILE not in dict(tree):
        contract = candidate.contract
    else:
        try:
            contract = parse_contract(tree, label)
        except UsageError:
            contract = candidate.contract
    return UserKernel(identity=identity, directory=directory, contract=contract, source=source)


def with_own_kernel(
    plan: Plan, baseline_ref: str | None = None, repo: Path | None = None
) -> tuple[Plan, OwnKernel]:
    """`plan` with our kernel among its user_kernels (and the A/B comparison against
    `baseline_ref`, whose tree is timed as '<candidate>@baseline'), and the trees the
    payload must carry. The plan names our kernel (its candidate, for an A/B)."""
    found = own_kernel(own_kernel_name(), baseline_ref, repo)
    # Declared afresh (resolving the plan declared the tree bench runs from).
    ours = {kernel.identity for kernel in found.kernels}
    others = [kernel for kernel in plan.user_kernels if kernel.identity not in ours]
    update = {"user_kernels": [*others, *found.kernels], "candidate_source": found.source}
    if found.comparison is not None:
        update["comparison"] = found.comparison
    return Plan.model_validate(plan.model_copy(update=update).model_dump()), found


def own_source(repo: Path | None = None) -> KernelIdentity:
    """Which kernels/ tree (and commit) bench runs from: a run's provenance, recorded even
    where it times no kernel of ours (`bench history` orders runs by it)."""
    kernels_dir = repo / KERNEL_PACKAGE if repo else package_dir(KERNEL_PACKAGE)
    return candidate_identity(kernels_dir, candidate_files(kernels_dir, skipped_in_kernels))


def declaring_own_kernel(plan: Plan) -> Plan:
    """`plan` as it will run: where it names our kernel, with our kernel declared among its
    user_kernels (what it supports, how it builds), so every check and estimate sees it."""
    if own_kernel_name() not in plan.implementations:
        return plan
    return with_own_kernel(plan)[0]


def is_our_tree(kernel: UserKernel) -> bool:
    """Whether a plan's kernel tree is ours as this module declares it (its folder, our
    kernel's name), not a user's `--kernel` tree."""
    return kernel.directory in (CANDIDATE_DIR, BASELINE_DIR) and (
        kernel.contract.name == own_kernel_name()
    )


def own_kernel_name() -> str:
    """The name our contract declares: what plans call our kernel ('flash')."""
    path = package_dir(KERNEL_PACKAGE) / CONTRACT_FILE
    return read_contract(path.read_bytes(), f"kernels/{CONTRACT_FILE}").name
