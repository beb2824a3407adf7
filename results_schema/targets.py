"""What a run's target can run, known without torch: the controller checks a plan against it
before anything is created, and the payload's registry must agree (a test holds them equal:
benches.registry.NAMES and results_schema/implementations.py, kernels.flash_attention's
SUPPORTED_DTYPES and SUPPORTED_HEAD_DIMS)."""

from __future__ import annotations

from results_schema.implementations import CUDA_ONLY, IMPLEMENTATIONS
from results_schema.models import Plan


def plan_problems(plan: Plan, has_gpu: bool) -> list[str]:
    """Everything in `plan` its target would refuse, each as what to change; [] if none."""
    problems = []
    users = {kernel.identity: kernel for kernel in plan.user_kernels}
    unknown = [n for n in plan.implementations if n not in IMPLEMENTATIONS and n not in users]
    if unknown:
        problems.append(
            f"unknown implementation {', '.join(map(repr, unknown))} (known: "
            f"{', '.join([*IMPLEMENTATIONS, *users])})"
        )
    if plan.warmup_min > plan.warmup_max:
        problems.append(f"warmup_min {plan.warmup_min} exceeds warmup_max {plan.warmup_max}")
    if plan.device == "cuda" and not has_gpu:
        problems.append("its device is cuda and there is no CUDA GPU here (try --plan cpu-smoke)")
    if plan.device == "cpu":
        on_gpu_only = [name for name in plan.implementations if name in CUDA_ONLY]
        if on_gpu_only:
            problems.append(f"its device is cpu, but {', '.join(on_gpu_only)} needs a CUDA GPU")
    for kernel in users.values():
        supports = kernel.contract.supports
        if plan.device not in supports.devices:
            problems.append(
                f"its device is {plan.device}, but {kernel.identity} runs on "
                f"{', '.join(supports.devices)} only (its supports.devices)"
            )
    candidate = users.get(plan.candidate)
    if candidate is not None:
        # A config the candidate's contract excludes is a row that says so; a plan of only
        # such configs would measure nothing the run is for.
        refused = [(c.name, candidate.contract.supports.refuses(c)) for c in plan.configs]
        if all(reason for _, reason in refused):
            name, reason = refused[0]
            problems.append(
                f"{plan.candidate} runs none of its configs (config {name!r}: {reason}; "
                f"its bench-kernel.toml's supports)"
            )
    return problems
