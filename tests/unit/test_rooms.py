"""One room per concept (issue 51): the rooms split apart stay apart. Imports are read from
the source (ast), those inside functions and under TYPE_CHECKING included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / package.replace(".", "/")).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path) -> set[str]:
    """Every module name `path` imports, wherever the import stands."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (a name resolved to its module)."""
    known = modules(package)
    edges = {}
    for name, path in known.items():
        targets = set()
        for target in imported(path):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        edges[name] = targets
    return edges


def a_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the path around it, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", ["benches", "orchestrator.report", "orchestrator.kernel_tree"])
def test_no_import_cycle_within(package):
    """benches: the worker and its parent import the kernel tree (benches/kernel_tree.py)
    below them, never each other through it; report: a sweep's figure is the sweep's."""
    assert a_cycle(graph(package)) is None


def test_the_cli_prints_without_the_trust_boundary():
    """The CLI's text helpers are orchestrator/text.py's: no command imports the boundary."""
    importers = [
        name
        for name, path in modules("orchestrator.cli").items()
        if any(target.startswith("orchestrator.boundary") for target in imported(path))
    ]
    assert importers == []


def test_the_payload_only_packs():
    """Reading a tree (git, links, sizes, the contract) is orchestrator/kernel_tree/'s."""
    payload = imported(REPO / "orchestrator" / "payload.py")
    assert not {"subprocess", "tarfile.TarInfo", "orchestrator.regular_file"} & payload
    assert not any(name.startswith("orchestrator.kernel_tree.git") for name in payload)


def test_the_controller_probes_the_local_gpu_in_one_place():
    """nvidia-smi is run by orchestrator/gpus.py (`local_gpu_name`) and nowhere else."""
    runners = [
        name
        for name, path in modules("orchestrator").items()
        if '"nvidia-smi"' in path.read_text(encoding="utf-8")
    ]
    assert runners == ["orchestrator.gpus"]
