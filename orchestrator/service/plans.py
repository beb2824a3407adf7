"""Plan resolution on the controller: NAME (benches/plans/NAME.json), FILE, or auto.

One resolver for both halves (benches.plan): the controller adds only how it decides
"auto" without torch, and the checks of a plan against what its target supports.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from benches.plan import PlanError, auto_plan_name
from benches.plan import plan_names as plan_names
from benches.plan import resolve_plan as resolve_plan_on_target
from orchestrator.errors import UsageError
from orchestrator.payload import package_dir
from results_schema import Plan
from results_schema.targets import plan_problems


def plans_dir() -> Path:
    return package_dir("benches") / "plans"


def local_gpu_present() -> bool:
    """nvidia-smi answering is enough: the controller never imports torch."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def target_has_gpu(backend: str) -> bool:
    """A gce VM always carries its GPU; a local run has what this machine has."""
    return backend == "gce" or local_gpu_present()


def resolve_plan(ref: str, backend: str, has_gpu: bool | None = None) -> tuple[Plan, str]:
    """The plan, checked against what `backend` can run (UsageError, exit 2, before anything
    is created), and a note to print when bench chose it for the user. `has_gpu` overrides
    what the target is found to have (a script rendered for another machine)."""
    note = ""
    if has_gpu is None:
        has_gpu = target_has_gpu(backend)
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
    problems = plan_problems(plan, has_gpu)
    if problems:
        where = "this machine" if backend == "local" else f"the {backend} target"
        raise UsageError(f"plan {plan.name!r} cannot run on {where}: " + "; ".join(problems))
    return plan, note
