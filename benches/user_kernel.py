"""Users' kernels as registry implementations (`bench launch --kernel DIR`).

`register` adds one implementation per kernel tree of the plan (benches/kernel_tree.py) to
benches.registry under the identity the plan times it as (the declared name,
'<name>@baseline'), so the gate, the timing and the statistics treat it as they treat
SDPA: one path for every implementation.

In a run each tree is imported in a worker process of its own (benches/isolation.py,
benches/worker.py): the candidate and its --baseline revision never share a process, so
their modules, their compiled extensions and their torch.ops namespaces cannot meet, and a
crash or a hang costs that kernel's config, not the run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from benches import registry
from benches.isolation import remote_implementation
from benches.kernel_tree import user_implementation
from benches.worker_start import payload_root
from results_schema import Plan


def register(plan: Plan, root: Path | None = None, isolated: bool = True) -> None:
    """Every user kernel of the plan, in the registry under its identity: each in a worker
    process of its own (benches/isolation.py), or, where the caller is already a process
    for one kernel (the profiler's target), imported here."""
    device = torch.device("cuda" if plan.device == "cuda" else "cpu")
    for kernel in plan.user_kernels:
        tree = (root or payload_root()) / kernel.directory
        registry.IMPLEMENTATIONS[kernel.identity] = (
            remote_implementation(kernel, tree, device, plan.flush_l2)
            if isolated
            else user_implementation(kernel, tree)
        )
