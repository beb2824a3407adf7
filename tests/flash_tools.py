"""The flash-attention kernel's developer tools (tools/flash_attention/), loaded as modules for
the host tests of their pure parts: they are scripts, not a package, and import one another by
their folder on sys.path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "flash_attention"


def load_tool(name: str) -> ModuleType:
    """tools/flash_attention/<name>.py as a module, with the repository root and the tools'
    folder on sys.path as the tools' own imports (kernels/, benches/, one another) need."""
    for folder in (str(TOOLS.parents[1]), str(TOOLS)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"flash_tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
