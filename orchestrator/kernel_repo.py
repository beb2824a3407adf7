"""A user's kernel repository (`bench launch --kernel DIR`): its tree, its contract, its
identity, read on the laptop and checked before anything is created.

The tree is read by the payload's `collect_tree` (as git sees it, no link, bounded:
orchestrator/payload.py), at the working tree or at a git revision of the same repository
(`--baseline REF`). The contract is the tree's own bench-kernel.toml, read from the collected
files (so a revision's contract is that revision's). Nothing of the user's code is imported
here: the entry point is checked by its module's file being in the tree.
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
from results_schema.models import BASELINE_SUFFIX

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
    """A kernel tree's files (names relative to its root) and the kernel as plans carry it."""

    files: TreeFiles
    kernel: UserKernel


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
    return KernelTree(files, kernel)


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
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"{label}: {CONTRACT_FILE} is not valid TOML: {error}") from None
    try:
        contract = ContractFile.model_validate(data).kernel
    except ValidationError as error:
        raise UsageError(f"{label}: {CONTRACT_FILE}: {_first_problem(error)}") from None
    _require_entry_module(files, contract, label)
    return contract


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "top level"
    if first["type"] == "extra_forbidden":
        return f"unknown key {where} (the keys are in {CONTRACT_DOCS})"
    if first["type"] == "missing":
        return f"{where} is required"
    return f"{where}: {first['msg']}"


def _require_entry_module(files: TreeFiles, contract: KernelContract, label: str) -> None:
    names = {name for name, _ in files}
    candidates = contract.entry_module_files()
    if not names.intersection(candidates):
        raise UsageError(
            f"{label}: entry {contract.entry} names a module that is not in the tree (no "
            f"{' or '.join(candidates)}; a file git ignores does not count)"
        )


def tree_sha256(files: TreeFiles) -> str:
    """The tree's content hash: sha256 over its sorted '<name>\\0<sha256 of contents>\\n'."""
    digest = hashlib.sha256()
    for name, data in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return digest.hexdigest()


def working_state(root: Path) -> dict:
    """The commit a working tree sits on and whether it differs from it; {} outside git or
    before a first commit."""
    try:
        commit = run_git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except UsageError:
        return {}
    status = run_git(root, "status", "--porcelain", "--untracked-files=normal", "--", ".")
    return {"commit": commit.decode().strip(), "dirty": bool(status.strip())}
