"""The import rules ARCHITECTURE.md states, read from the source with `ast`: no circle, the
layers, one room per concept (issue 51).

The graph counts what running the code may not show: imports inside functions (run on
first use) and imports under TYPE_CHECKING (a type that names its way up a layer is a
circle all the same).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "benches", "kernels")

# The circles another change is removing, each exactly as it stands: one that gains or
# loses a module, goes, or is not listed fails, so the list says what is true.
KNOWN_CIRCLES: list[set[str]] = []


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file, for every module of the packages (a package by its name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> list[str]:
    """The dotted names one import statement names: a module, or a module's attribute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imported(path: Path, name: str) -> list[str]:
    """Every dotted name the module `name` (at `path`) imports, wherever the import stands:
    a module, or a module's attribute; a relative import made absolute."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend(_imported(node, name, is_package))
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports, wherever the import stands."""
    found = modules(root)

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in found:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for dotted in imported(path, name):
            target = owner(dotted)
            if target is not None and target != name:
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_circle_but_the_known_ones():
    """benches: the worker and its parent import the kernel tree (benches/kernel_tree.py)
    below them, never each other through it; report: a sweep's figure is the sweep's;
    gce: `doctor --probe`'s script reads the VM's settings from script_vars.py, below the
    backend that offers doctor."""
    found = sorted(sorted(circle) for circle in circles(import_graph()))
    assert found == sorted(sorted(circle) for circle in KNOWN_CIRCLES), (
        "import circles (an import inside a function counts), against KNOWN_CIRCLES"
    )


def test_the_graph_sees_imports_in_functions_and_under_type_checking(tmp_path):
    package = tmp_path / "orchestrator"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from orchestrator import high\n")
    (package / "high.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .low import f\n"
    )
    (package / "leaf.py").write_text("import orchestrator.low\n")
    assert circles(import_graph(tmp_path)) == [{"orchestrator.low", "orchestrator.high"}]


def test_a_listed_circle_that_went_or_changed_fails(tmp_path):
    package = tmp_path / "orchestrator"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from orchestrator import b\n")
    (package / "b.py").write_text("from orchestrator import a\n")
    (package / "c.py").write_text("")
    assert circles(import_graph(tmp_path)) == [{"orchestrator.a", "orchestrator.b"}]
    (package / "b.py").write_text("")
    assert circles(import_graph(tmp_path)) == []


def room(dotted: str) -> str:
    """The package of orchestrator/ a module is in (orchestrator.cli.launch -> cli), or
    "beside" for the modules beside the layers (config, budget, render, ...)."""
    parts = dotted.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return parts[0]
    layers = ("cli", "service", "report", "backends", "stores", "boundary", "kernel_tree")
    return parts[1] if parts[1] in layers else "beside"


def importers(of: str) -> set[str]:
    """The rooms of orchestrator/ whose modules import a module of room `of`."""
    graph = import_graph()
    return {
        room(name)
        for name, targets in graph.items()
        if name.startswith("orchestrator.") and name != "orchestrator.__main__"
        for target in targets
        if room(target) == of and room(name) != of
    }


def test_imports_flow_down_the_layers():
    """cli -> service -> report/ -> backends, stores -> the modules beside them (ARCHITECTURE.md):
    nothing imports a command but `python -m orchestrator`, only commands import the service,
    and the service's report/ imports no use case."""
    assert importers("cli") == set()
    assert importers("service") == {"cli"}
    assert importers("report") <= {"cli", "service"}


def test_a_module_beside_the_layers_reaches_a_backend_only_by_its_name():
    """config checks a name against backends/names.py; render, payload and the runtime model
    read a backend's Capabilities through backends/registry.py, which imports the class
    when asked. No module beside the layers imports a backend, a store or the service."""
    graph = import_graph()
    reached = {
        target
        for name, targets in graph.items()
        if room(name) in ("beside", "boundary", "kernel_tree") and name != "orchestrator.__main__"
        for target in targets
        if room(target) in ("cli", "service", "report", "backends", "stores")
    }
    assert reached <= {"orchestrator.backends.names", "orchestrator.backends.registry"}


def test_the_cli_prints_without_the_trust_boundary():
    """The CLI's text helpers are orchestrator/text.py's: no command imports the boundary."""
    graph = import_graph()
    cli = [name for name in graph if room(name) == "cli"]
    assert cli and not [name for name in cli if any(room(t) == "boundary" for t in graph[name])]


def test_the_payload_only_packs():
    """Reading a tree (git, links, sizes, the contract) is orchestrator/kernel_tree/'s."""
    payload = set(imported(ROOT / "orchestrator" / "payload.py", "orchestrator.payload"))
    assert not {"subprocess", "tarfile.TarInfo", "orchestrator.regular_file"} & payload
    assert not any(name.startswith("orchestrator.kernel_tree.git") for name in payload)


def test_the_controller_probes_the_local_gpu_in_one_place():
    """nvidia-smi is run by orchestrator/gpus.py (`local_gpu_name`) and nowhere else."""
    runners = [
        name
        for name, path in modules().items()
        if name.startswith("orchestrator") and '"nvidia-smi"' in path.read_text(encoding="utf-8")
    ]
    assert runners == ["orchestrator.gpus"]
