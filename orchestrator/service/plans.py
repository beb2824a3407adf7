"""Plan resolution on the controller: NAME (benches/plans/NAME.json), FILE, or auto.

One resolver for both halves (benches.plan): the controller adds how it decides "auto"
without torch (a user's kernel's own plan when its contract names one, else by the target's
GPU), and the checks of a plan against what its target supports.
"""

from __future__ import annotations

from pathlib import Path

from benches.plan import PlanError, auto_plan_name
from benches.plan import plan_names as plan_names
from benches.plan import resolve_plan as resolve_plan_on_target
from orchestrator.backends.registry import capabilities
from orchestrator.errors import UsageError
from orchestrator.gpus import local_gpu_name
from orchestrator.kernel_tree.collect import package_dir
from orchestrator.kernel_tree.own import declaring_own_kernel
from orchestrator.kernel_tree.user import KernelTree
from orchestrator.service.plan_options import with_user_kernels
from results_schema import Plan
from results_schema.targets import plan_problems


def plans_dir() -> Path:
    return package_dir("benches") / "plans"


def local_gpu_present() -> bool:
    """nvidia-smi naming a GPU is enough (`gpus.local_gpu_name`, the controller's one
    probe of this machine's GPU): the controller never imports torch."""
    return local_gpu_name() is not None


def target_has_gpu(backend: str) -> bool:
    """A gce VM always carries its GPU; a local run has what this machine has."""
    return capabilities(backend).always_has_gpu or local_gpu_present()


def resolve_plan(
    ref: str, backend: str, has_gpu: bool | None = None, candidate: KernelTree | None = None
) -> tuple[Plan, str]:
    """The plan, checked against what `backend` can run (UsageError, exit 2, before anything
    is created), and a note to print when bench chose it for the user. `has_gpu` overrides
    what the target is found to have (a script rendered for another machine). With a user's
    kernel tree (`--kernel`, as `read_candidate` read it), "auto" is the plan its contract
    names."""
    if has_gpu is None:
        has_gpu = target_has_gpu(backend)
    if ref == "auto" and candidate is not None:
        tree = candidate
        if tree.plan is not None:
            name, path = tree.plan.name, tree.kernel.contract.plan
            note = f"--plan auto: the kernel's own plan {name!r} ({path}; --plan names another)"
            # Checked as it will run: the kernel its candidate, the rest its yardsticks.
            timed = with_user_kernels(tree.plan, [tree.kernel], None, [])
            _refuse_problems(tree.plan.name, plan_problems(timed, has_gpu), backend)
            return tree.plan, note
    return _resolve_named(ref, backend, has_gpu)


def _resolve_named(ref: str, backend: str, has_gpu: bool) -> tuple[Plan, str]:
    note = ""
    if ref == "auto":
        ref = auto_plan_name(has_gpu)
        if not has_gpu:
            note = (
                f"no CUDA GPU on this machine: --plan auto chose {ref!r}, which times "
                "SDPA on the CPU; these numbers say nothing about GPU kernels"
            )
    try:
        plan = resolve_plan_on_target(ref, cuda_available=has_gpu)
    except PlanError as e:
        choices = ", ".join(plan_names())
        raise UsageError(f"{e}; choose one of {choices}, auto, or a .json file") from None
    plan = declaring_own_kernel(plan)
    _refuse_problems(plan.name, plan_problems(plan, has_gpu), backend)
    return plan, note


def refuse_unrunnable(plan: Plan, backend: str) -> None:
    """The plan as shaped by the launch's options (--candidate, --baseline, --peers), checked
    again: an option can ask for what the target cannot run (an unknown name, our kernel on a
    machine without a GPU). UsageError, before anything is created."""
    _refuse_problems(plan.name, plan_problems(plan, target_has_gpu(backend)), backend)


def _refuse_problems(name: str, problems: list[str], backend: str) -> None:
    if problems:
        where = capabilities(backend).target_phrase
        raise UsageError(f"plan {name!r} cannot run on {where}: " + "; ".join(problems))
