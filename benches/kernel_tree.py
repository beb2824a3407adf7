"""A kernel tree on the target, as the harness runs it: below both the worker that
imports it (benches/worker.py) and the parent that times it (benches/isolation.py).

plan.json names each kernel tree the payload carries (results_schema.kernel_contract:
UserKernel): its folder beside benches/, its contract and its identity. Ours
(kernels/bench-kernel.toml, `flash`) is one of them: nothing here knows it by name. What
its contract and its build say it cannot run (`declared_unavailable`,
`declared_unsupported`) both sides read; the worker alone imports the tree
(`user_implementation`): its entry point with the tree first on sys.path, resolved to a
file of that tree (`load_entry`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from benches import registry
from results_schema import AttentionConfig
from results_schema.kernel_contract import BUILD_FAILED_SUFFIX, KernelSupports, UserKernel


@dataclass(frozen=True)
class UserImplementation(registry.Implementation):
    """An implementation that may also refuse a config it does not support."""

    unsupported: Callable[[AttentionConfig], str | None] = lambda config: None


def declared_unavailable(kernel: UserKernel, tree: Path, device: torch.device) -> str | None:
    """Why the kernel cannot run on `device` at all, from its contract and its build."""
    supports = kernel.contract.supports
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
    return None


def declared_unsupported(supports: KernelSupports, config: AttentionConfig) -> str | None:
    """Why the contract's keys exclude `config`, if they do."""
    return supports.refuses(config)


def user_implementation(kernel: UserKernel, tree: Path) -> UserImplementation:
    """The kernel imported into this process (a worker's, or the profiler's target), with
    its contract's env set first, as its build had it."""
    os.environ.update(kernel.env_for(str(tree)))
    loaded: dict[str, Callable] = {}
    contract, supports = kernel.contract, kernel.contract.supports
    ran = f"user:{contract.name}@{kernel.source.label()}"  # which tree ran, in every row

    def entry(name: str, target: str) -> Callable:
        if name not in loaded:
            loaded[name] = load_entry(tree, target)
        return loaded[name]

    def available(device: torch.device) -> str | None:
        reason = declared_unavailable(kernel, tree, device)
        if reason is None:
            try:
                entry("fn", contract.entry)
            except Exception as error:  # the kernel's failure, reported in its rows
                return f"import of {contract.entry} failed: {type(error).__name__}: {error}"
        return reason

    def run(q, k, v, causal, **descales):  # FP8: q_descale, k_descale, v_descale
        fn = entry("fn", contract.entry)
        return fn(q, k, v, causal=bool(causal), scale=q.shape[-1] ** -0.5, **descales)

    def unsupported(config: AttentionConfig) -> str | None:
        reason = declared_unsupported(supports, config)
        if reason is None and supports.check:
            reason = supports_check(entry("check", supports.check), config)
        return reason

    return UserImplementation(kernel.identity, run, lambda *a: ran, available, unsupported)


def supports_check(check: Callable, config: AttentionConfig) -> str | None:
    """The kernel's own `supports.check` answer for `config`: None where it runs it, else
    'unsupported: <its reason>'. An answer of another type, or an exception, is a reason
    too: a broken check must not let a config through, nor stop the run."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    shown = SimpleNamespace(
        batch=config.batch,
        heads=config.heads,
        kv_heads=config.key_heads,
        seq_len=config.seq_len,
        head_dim=config.head_dim,
        dtype=config.dtype,
        causal=config.causal,
        device=device.type,
        compute_capability=capability,
    )
    try:
        answer = check(shown)
    except Exception as error:
        return f"unsupported: its supports check raised {type(error).__name__}: {error}"[:300]
    if answer is None or answer is True:
        return None
    if isinstance(answer, str) and answer.strip():
        return "unsupported: " + " ".join(answer.split())[:280]
    return f"unsupported: its supports check answered {type(answer).__name__}, not None or a reason"


def load_entry(tree: Path, entry: str) -> Callable:
    """`package.module:function` imported with `tree` first on sys.path, where it stays: the
    process is this tree's alone (a worker, or the profiler's target), and the package may
    import more of itself when called. The module must be a file of the tree: a package of
    the same name already imported (bench's own `kernels`, say) is refused, not used."""
    module_name, function = entry.split(":")
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
        importlib.invalidate_caches()
    module = importlib.import_module(module_name)
    origin = Path(getattr(module, "__file__", "") or "").resolve()
    if not origin.is_relative_to(tree.resolve()):
        raise ImportError(f"{module_name} resolved to {origin}, outside the kernel's tree")
    return getattr(module, function)
