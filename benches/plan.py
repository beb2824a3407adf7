"""Plans are data: benches/plans/NAME.json, validated by results_schema.Plan on load."""

from __future__ import annotations

import sys
from pathlib import Path

from results_schema import Plan

PLANS_DIR = Path(__file__).parent / "plans"


class PlanError(ValueError):
    """A plan name or file that cannot be used."""


def plan_names() -> list[str]:
    return sorted(p.stem for p in PLANS_DIR.glob("*.json"))


def load_plan_file(path: Path) -> Plan:
    from pydantic import ValidationError

    try:
        return Plan.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror or exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise PlanError(f"plan {path} is invalid at {where}: {first['msg']}") from exc
    except ValueError as exc:  # not UTF-8
        raise PlanError(f"plan {path} is not UTF-8 JSON: {exc}") from exc


def auto_plan_name(cuda_available: bool) -> str:
    return "default" if cuda_available else "cpu-smoke"


def resolve_plan(spec: str, cuda_available: bool | None = None) -> Plan:
    """`spec` is a shipped plan's name, a path to a plan file, or `auto`.

    `auto` takes the GPU plan when torch sees a CUDA device, else the CPU smoke plan, and
    says so loudly: a CPU run must never pass for a GPU benchmark.
    """
    if spec == "auto":
        if cuda_available is None:
            import torch

            cuda_available = torch.cuda.is_available()
        name = auto_plan_name(cuda_available)
        if not cuda_available:
            print(
                "WARNING: no CUDA GPU found; --plan auto falls back to the 'cpu-smoke' plan. "
                "Its numbers time PyTorch on the CPU and say nothing about GPU kernels.",
                file=sys.stderr,
            )
        return load_plan_file(PLANS_DIR / f"{name}.json")
    if spec in plan_names():
        return load_plan_file(PLANS_DIR / f"{spec}.json")
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        return load_plan_file(path)
    raise PlanError(
        f"unknown plan {spec!r}: use a file path, auto, or one of {', '.join(plan_names())}"
    )


def samples_per_config(plan: Plan, total_per_implementation: int | None) -> list[int]:
    """How many timed samples each config gets.

    With `--measurements N`, N samples per implementation are spread over the configs as
    evenly as possible (the first N % configs get one more), so a run has exactly N rows per
    implementation; without it, every config gets plan.samples_per_config.
    """
    count = len(plan.configs)
    if total_per_implementation is None:
        return [plan.samples_per_config] * count
    if total_per_implementation < count:
        raise PlanError(
            f"--measurements {total_per_implementation} is fewer than one sample for each of "
            f"the plan's {count} configurations"
        )
    base, extra = divmod(total_per_implementation, count)
    return [base + (1 if i < extra else 0) for i in range(count)]
