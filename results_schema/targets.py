"""What a run's target can run, known without torch: the controller checks a plan against it
before anything is created, and the payload's registry must agree (a test holds them equal:
kernels.registry.NAMES, kernels.flash_attention's SUPPORTED_DTYPES and SUPPORTED_HEAD_DIMS)."""

from __future__ import annotations

from results_schema.models import Plan
from results_schema.peers import PEER_NAMES

CALIBRATION_FRACTIONS = (16, 32, 64, 128)
IMPLEMENTATIONS = (
    "flash",
    "flash@baseline",  # the A/B baseline's kernels/ tree (`bench launch --baseline`)
    "sdpa",
    "reference",
    *(f"sdpa-extra{n}" for n in CALIBRATION_FRACTIONS),
    "sdpa-flash",
    "sdpa-cudnn",
    "sdpa-efficient",
    "sdpa-math",
    *PEER_NAMES,  # public libraries (results_schema/peers.py), timed with --peers
)
# Implementations that refuse a CPU device.
CUDA_ONLY = ("flash", "flash@baseline", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", *PEER_NAMES)
# Our kernel: one compiled unit per (dtype, head dim). Which GPUs it runs on is
# kernels.support's to say (a GPU below its minimum records `unsupported`, not an error).
FLASH_DTYPES = ("float16", "bfloat16")
FLASH_HEAD_DIMS = (64, 128, 256)


def plan_problems(plan: Plan, has_gpu: bool) -> list[str]:
    """Everything in `plan` its target would refuse, each as what to change; [] if none."""
    problems = []
    users = {kernel.identity: kernel for kernel in plan.user_kernels}
    unknown = [n for n in plan.implementations if n not in IMPLEMENTATIONS and n not in users]
    if unknown:
        problems.append(
            f"unknown implementation {', '.join(map(repr, unknown))} (known: "
            f"{', '.join(IMPLEMENTATIONS)})"
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
        if plan.device not in kernel.contract.supports.devices:
            problems.append(
                f"its device is {plan.device}, but {kernel.identity} runs on "
                f"{', '.join(kernel.contract.supports.devices)} only (its supports.devices)"
            )
    if {"flash", "flash@baseline"} & set(plan.implementations):
        for config in plan.configs:
            if config.dtype not in FLASH_DTYPES or config.head_dim not in FLASH_HEAD_DIMS:
                problems.append(
                    f"config {config.name!r} ({config.dtype}, head_dim {config.head_dim}) has "
                    f"no flash kernel: flash runs {'/'.join(FLASH_DTYPES)} with head_dim "
                    f"{' or '.join(map(str, FLASH_HEAD_DIMS))}"
                )
    return problems
