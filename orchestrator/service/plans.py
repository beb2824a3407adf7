"""Plan resolution on the controller: NAME (benches/plans/NAME.json), FILE, or auto."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import UsageError
from orchestrator.payload import package_dir
from results_schema import Plan

CPU_PLAN = "cpu-smoke"
GPU_PLAN = "default"


def plans_dir() -> Path:
    return package_dir("benches") / "plans"


def plan_names() -> list[str]:
    return sorted(p.stem for p in plans_dir().glob("*.json"))


def local_gpu_present() -> bool:
    """nvidia-smi answering is enough: the controller never imports torch."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolve_plan(ref: str, backend: str) -> tuple[Plan, str]:
    """The plan, and a note to print when bench chose it for the user."""
    note = ""
    if ref == "auto":
        if backend == "gce" or local_gpu_present():
            ref = GPU_PLAN
        else:
            ref, note = (
                CPU_PLAN,
                (
                    f"no CUDA GPU on this machine: --plan auto chose {CPU_PLAN!r}, which times "
                    "SDPA on the CPU; these numbers say nothing about GPU kernels"
                ),
            )
    path = Path(ref)
    if not (ref.endswith(".json") or path.is_file()):
        path = plans_dir() / f"{ref}.json"
        if not path.is_file():
            raise UsageError(
                f"unknown plan {ref!r}; choose one of {', '.join(plan_names())}, "
                "auto, or a .json file"
            )
    try:
        return Plan.model_validate_json(path.read_text()), note
    except OSError as e:
        raise UsageError(f"cannot read plan {path}: {e.strerror}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(
            f"plan {path} is invalid at {where or 'top level'}: {first['msg']}"
        ) from None
