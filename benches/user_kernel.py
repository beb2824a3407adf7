"""Users' kernels as registry implementations (`bench launch --kernel DIR`).

plan.json names each user kernel tree the payload carries (results_schema.kernel_contract:
UserKernel): its folder beside benches/, its contract and its identity. `register` adds one
implementation per tree to kernels.registry under the identity the plan times it as (the
declared name, '<name>@baseline'), so the gate, the timing and the statistics treat it as
they treat SDPA: one path for every implementation.

The entry point is imported with its tree first on sys.path, then its package's modules are
taken out of sys.modules again (and whatever they displaced put back): two versions of one
package, the candidate and its --baseline revision, load side by side without shadowing each
other, each function keeping its own module's globals. This isolates pure-Python packages;
a package that imports more of itself lazily at call time, or two builds of one compiled
extension registering one torch.ops namespace, would still meet the other version: a child
process per tree is the complete answer, and not built yet.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kernels import registry
from results_schema import AttentionConfig, Plan
from results_schema.kernel_contract import UserKernel

BUILD_FAILED_SUFFIX = ".build-failed"  # written by the startup script's build phase


def payload_root() -> Path:
    """The folder holding benches/ and the user kernel trees beside it."""
    return Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class UserImplementation(registry.Implementation):
    """An implementation that may also refuse a config it does not support."""

    unsupported: Callable[[AttentionConfig], str | None]


def register(plan: Plan, root: Path | None = None) -> None:
    """Every user kernel of the plan, in the registry under its identity."""
    for kernel in plan.user_kernels:
        tree = (root or payload_root()) / kernel.directory
        registry.IMPLEMENTATIONS[kernel.identity] = user_implementation(kernel, tree)


def user_implementation(kernel: UserKernel, tree: Path) -> UserImplementation:
    loaded: dict[str, Callable] = {}
    contract, supports = kernel.contract, kernel.contract.supports
    ran = f"user:{contract.name}@{kernel.source.label()}"  # which tree ran, in every row

    def available(device: torch.device) -> str | None:
        if device.type not in supports.devices:
            return f"unsupported: runs on {', '.join(supports.devices)} only"
        if device.type == "cuda" and supports.min_capability():
            have = torch.cuda.get_device_capability(device)
            if have < supports.min_capability():
                return f"unsupported on sm_{have[0]}{have[1]}"
        failed = tree.parent / (tree.name + BUILD_FAILED_SUFFIX)
        if failed.is_file():
            last = failed.read_text(encoding="utf-8", errors="replace").strip()
            return f"build failed: {last}"[:300]
        if "fn" not in loaded:
            try:
                loaded["fn"] = load_entry(tree, contract.entry)
            except Exception as error:  # the kernel's failure, reported in its rows
                return f"import of {contract.entry} failed: {type(error).__name__}: {error}"
        return None

    def run(q, k, v, causal):
        if "fn" not in loaded:
            loaded["fn"] = load_entry(tree, contract.entry)
        return loaded["fn"](q, k, v, causal=bool(causal), scale=q.shape[-1] ** -0.5)

    def unsupported(config: AttentionConfig) -> str | None:
        if config.dtype not in supports.dtypes:
            return f"unsupported: dtype {config.dtype} (it supports {', '.join(supports.dtypes)})"
        if supports.head_dims is not None and config.head_dim not in supports.head_dims:
            dims = ", ".join(map(str, supports.head_dims))
            return f"unsupported: head_dim {config.head_dim} (it supports {dims})"
        if config.causal and not supports.causal:
            return "unsupported: causal"
        if config.key_heads != config.heads and not supports.gqa:
            return "unsupported: grouped-query attention (k/v with fewer heads than q)"
        return None

    return UserImplementation(kernel.identity, run, lambda *a: ran, available, unsupported)


def load_entry(tree: Path, entry: str) -> Callable:
    """`package.module:function` imported from `tree` alone, its package's modules then
    taken out of sys.modules (the module docstring says why)."""
    module_name, function = entry.split(":")
    package = module_name.split(".")[0]
    displaced = _take_modules(package)
    sys.path.insert(0, str(tree))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
        origin = Path(getattr(module, "__file__", "") or "").resolve()
        if not origin.is_relative_to(tree.resolve()):
            raise ImportError(f"{module_name} resolved to {origin}, outside the kernel's tree")
        return getattr(module, function)
    finally:
        sys.path.remove(str(tree))
        _take_modules(package)
        sys.modules.update(displaced)


def _take_modules(package: str) -> dict:
    taken = {n: m for n, m in sys.modules.items() if n == package or n.startswith(package + ".")}
    for name in taken:
        del sys.modules[name]
    return taken
