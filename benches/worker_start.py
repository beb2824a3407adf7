"""Starting a kernel's worker process (benches/worker.py), early where it can be.

A worker's start is a fresh interpreter importing torch, a CUDA context and the kernel's
entry point: 4.8 s on an H100 (2026-11-27), of which `import torch` is 3-4.5 s, and the
parent pays the same import. Both phases that use workers (the gate, the timing) used to
pay them one after the other. `prestart` starts every worker of the plan before the parent
imports torch, so the two imports overlap; the parent's `Worker` (benches/isolation.py)
adopts the process at its first request, or starts one then as before where none was
started for it (a restarted worker, a worker of another caller).

This module imports no torch: it must run before the parent does.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from results_schema import Plan

BUILD_FAILED_SUFFIX = ".build-failed"  # written by the startup script's build phase

# What a worker is started with: (kernel JSON, tree, device, flush_l2) -> (process, pipe).
_started: dict[tuple[str, str, str, bool], tuple] = {}


def payload_root() -> Path:
    """The folder holding benches/ and the user kernel trees beside it."""
    return Path(__file__).resolve().parent.parent


def serve(conn, kernel_json: str, tree: str, device: str, flush_l2: bool) -> None:
    """The child's entry: the worker module (and torch with it) imported there only."""
    from benches import worker

    worker.serve(conn, kernel_json, tree, device, flush_l2)


def start(args: tuple[str, str, str, bool], name: str):
    """A new worker process started with `args`; returns (process, the parent's pipe end)."""
    context = multiprocessing.get_context("spawn")  # fork would copy a CUDA context
    parent, child = context.Pipe()
    process = context.Process(target=serve, args=(child, *args), name=name, daemon=True)
    process.start()
    child.close()
    return process, parent


def prestart(plan: Plan, identities: list[str], root: Path | None = None) -> int:
    """A worker started now for each kernel tree of `plan` among `identities` whose build
    did not fail; returns how many were started."""
    device = "cuda" if plan.device == "cuda" else "cpu"
    count = 0
    for kernel in plan.user_kernels:
        tree = (root or payload_root()) / kernel.directory
        if (
            kernel.identity not in identities
            or (tree.parent / (tree.name + BUILD_FAILED_SUFFIX)).exists()
        ):
            continue
        args = (kernel.model_dump_json(), str(tree), device, plan.flush_l2)
        if args not in _started:
            _started[args] = start(args, f"bench-worker-{kernel.identity}")
            count += 1
    return count


def adopt(args: tuple[str, str, str, bool]):
    """The (process, pipe) prestarted with exactly `args` and still alive, taken (a second
    call gets None), or None."""
    started = _started.pop(args, None)
    if started is None:
        return None
    process, conn = started
    if not process.is_alive() and not conn.poll():
        conn.close()  # died before saying anything: the caller starts another
        process.join(timeout=10)
        return None
    return started
