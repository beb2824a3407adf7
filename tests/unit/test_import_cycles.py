"""Imports flow one way (ARCHITECTURE.md): no module of orchestrator/, benches/ or kernels/
reaches, through any chain of imports, back to itself.

The graph is drawn from the source with `ast`, so it counts what running the code may
not show: imports inside functions (run on first use) and imports under TYPE_CHECKING (a
type that names its way up a layer is a circle all the same).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "benches", "kernels")

# Circles other changes are removing. The list must end empty: a circle may shrink or go
# (then take its line out), but one not listed, or a listed one that gains a module, fails.
KNOWN_CIRCLES = [
    {
        "benches.isolation",
        "benches.user_kernel",
        "benches.worker",
        "benches.worker_start",
    },
    {
        "orchestrator.backends.gce.backend",
        "orchestrator.backends.gce.doctor",
        "orchestrator.backends.gce.probe",
        "orchestrator.backends.gce.probe_run",
    },
    {
        "orchestrator.report.plots",
        "orchestrator.report.service",
        "orchestrator.report.sweep",
    },
    {
        "kernels.flash_attention",
        "kernels.flash_attention.api",
        "kernels.flash_attention.build",
        "kernels.flash_attention.smoke",
    },
]


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


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports, wherever the import stands."""
    found = modules(root)

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in found:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            is_package = path.name == "__init__.py"
            for dotted in _imported(node, name, is_package):
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


def test_no_import_circle_but_the_known_ones_and_none_grows():
    unexpected = [
        sorted(circle)
        for circle in circles(import_graph())
        if not any(circle <= known for known in KNOWN_CIRCLES)
    ]
    assert not unexpected, f"import circles (an import inside a function counts): {unexpected}"


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
