"""A kernel tree's contract (bench-kernel.toml, docs/kernel-contract.md), read from the
tree's collected files, so a revision's contract is that revision's, and the plan of its
own a contract may name. Nothing of the user's code is imported: an entry point is checked
by its module's file being in the tree.
"""

from __future__ import annotations

from pydantic import ValidationError

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.collect import TreeFiles
from results_schema.kernel_contract import CONTRACT_FILE, ContractFile, KernelContract
from results_schema.models import Plan

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CONTRACT_DOCS = "docs/kernel-contract.md"


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
