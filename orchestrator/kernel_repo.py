"""A user's kernel repository (`bench launch --kernel DIR`): its tree, its contract, its
identity, read on the laptop and checked before anything is created.

The tree is read by the payload's `collect_tree` (as git sees it, no link, bounded:
orchestrator/payload.py), at the working tree or at a git revision of the same repository
(`--baseline REF`). The contract is the tree's own bench-kernel.toml, read from the collected
files (so a revision's contract is that revision's), and so is the plan of the kernel's own
that a contract may name (the candidate's only: a --baseline revision is timed on the
candidate's shapes). Nothing of the user's code is imported here: the entry point is checked
by its module's file being in the tree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import UsageError
from orchestrator.payload import TreeFiles, collect_tree, resolve_commit, run_git
from results_schema.kernel_contract import (
    CONTRACT_FILE,
    ContractFile,
    KernelContract,
    KernelIdentity,
    UserKernel,
)
from results_schema.models import BASELINE_SUFFIX, Plan
from results_schema.record import tree_digest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# The trees' folders in the payload, beside benches/ and kernels/.
CANDIDATE_DIR = "user_kernel"
BASELINE_DIR = "user_kernel_baseline"
CONTRACT_DOCS = "docs/kernel-contract.md"


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


def parse_contract(files: TreeFiles, label: str) -> KernelContract:
    """The tree's contract, or a UsageError naming the first thing wrong with it."""
    text = dict(files).get(CONTRACT_FILE)
    if text is None:
        raise UsageError(
            f"{label}: no {CONTRACT_FILE} at its root (the file that declares a kernel: "
            f"{CONTRACT_DOCS})"
        )
    contract = read_contract(text, label)
    _require_entry_module(files, contract, label)
    return contract


def read_contract(text: bytes, label: str) -> KernelContract:
    """A contract file's contents, validated (its entry points not yet looked for)."""
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"{label}: {CONTRACT_FILE} is not valid TOML: {error}") from None
    try:
        return ContractFile.model_validate(data).kernel
    except ValidationError as error:
        raise UsageError(f"{label}: {CONTRACT_FILE}: {_first_problem(error)}") from None


def own_plan(files: TreeFiles, contract: KernelContract, label: str) -> Plan | None:
    """The plan the contract names, from the collected files (a file git ignores, or one
    outside the tree, is not among them), or a UsageError saying what is wrong with it."""
    if contract.plan is None:
        return None
    data = dict(files).get(contract.plan)
    if data is None:
        raise UsageError(
            f"{label}: {CONTRACT_FILE} names plan {contract.plan}, which is not a file of the "
            "tree (a file git ignores does not count)"
        )
    try:
        return Plan.model_validate_json(data)
    except ValidationError as error:
        raise UsageError(
            f"{label}: {contract.plan} is not a valid plan: {_first_problem(error)}"
        ) from None


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "top level"
    if first["type"] == "extra_forbidden":
        return f"unknown key {where} (the keys are in {CONTRACT_DOCS})"
    if first["type"] == "missing":
        return f"{where} is required"
    return f"{where}: {first['msg']}"


# The harness's own packages, imported in every kernel's worker process before the kernel:
# a tree's package of the same name would never be imported (the harness's would be found).
# (kernels/ is not one: it is our kernel's tree, shipped and imported as any kernel's.)
HARNESS_PACKAGES = ("benches", "results_schema", "orchestrator")


def _require_entry_module(files: TreeFiles, contract: KernelContract, label: str) -> None:
    names = {name for name, _ in files}
    for key, entry in contract.entry_points():
        package = entry.split(".")[0].split(":")[0]
        if package in HARNESS_PACKAGES:
            raise UsageError(
                f"{label}: {key} {entry}: a package named {package!r} cannot be imported "
                f"beside bench's own ({', '.join(HARNESS_PACKAGES)}): rename it"
            )
        candidates = contract.entry_module_files(entry)
        if not names.intersection(candidates):
            raise UsageError(
                f"{label}: {key} {entry} names a module that is not in the tree (no "
                f"{' or '.join(candidates)}; a file git ignores does not count)"
            )


def tree_sha256(files: TreeFiles) -> str:
    """The tree's content hash (results_schema.record.tree_digest, which the target
    computes from its disk)."""
    return tree_digest((name, hashlib.sha256(data).hexdigest()) for name, data in files)


def working_state(root: Path) -> dict:
    """The commit a working tree sits on and whether it differs from it; {} outside git or
    before a first commit."""
    try:
        commit = run_git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except UsageError:
        return {}
    status = run_git(root, "status", "--porcelain", "--untracked-files=normal", "--", ".")
    return {"commit": commit.decode().strip(), "dirty": bool(status.strip())}
