"""Which GPUs and head dims our kernel runs on, decided without torch, so the build phase
(nvidia-smi's compute_cap), the generator and the binding give one answer.

The kernel uses bf16 tensor cores and cp.async, which start with sm_80 (Ampere); a T4
(sm_75) runs the SDPA baselines only, and its results say `flash: unsupported on sm_75`.
Head dims are the ones a unit is generated for (generate.py reads HEAD_DIMS from here).

    python -m kernels.support 7.5    # prints "unsupported on sm_75", exits 1
"""

from __future__ import annotations

import sys

MIN_CAPABILITY = (8, 0)
# Every path (sm_80 kernel, L4 shapes, Hopper kernel) has a shape for each of these.
HEAD_DIMS = (64, 128, 256)
# Why the others are refused: each path stores rows as 64-column blocks (Hopper's TMA
# boxes, 128-byte swizzle) or as 16-byte chunks spread evenly over a block's threads.
# FP8 (e4m3 in, bf16 out): its own Hopper kernel (csrc/flash_fwd_sm90_fp8.cuh), built on wgmma's
# FP8 form, which exists on sm_90 alone (no fallback: sm_80 has no FP8 tensor cores, sm_89 has
# them through mma.sync only). One unit per head dim here (generate.py reads them from here).
FP8_DTYPE_NAME = "float8_e4m3fn"
FP8_CAPABILITY = (9, 0)
FP8_HEAD_DIMS = (128, 256)
_HEAD_DIM_REFUSALS = {
    96: "96 is not a multiple of 64, the column block of the Hopper kernel's tiles; "
    "pad to 128 or use SDPA",
}


def arch_name(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


def parse_capability(text: str) -> tuple[int, int]:
    """`7.5` (nvidia-smi's compute_cap) -> (7, 5)."""
    major, _, minor = text.strip().partition(".")
    return int(major), int(minor or 0)


def unsupported_reason(major: int, minor: int) -> str | None:
    """None where the kernel runs, else the result to record, e.g. `unsupported on sm_75`."""
    if (major, minor) >= MIN_CAPABILITY:
        return None
    return f"unsupported on {arch_name(major, minor)}"


def head_dim_unsupported_reason(head_dim: int) -> str | None:
    """None where the kernel has units for `head_dim`, else why not (a sentence)."""
    if head_dim in HEAD_DIMS:
        return None
    allowed = ", ".join(map(str, HEAD_DIMS))
    why = _HEAD_DIM_REFUSALS.get(head_dim, "no unit is generated for it")
    return f"head_dim {head_dim} is not supported ({why}); allowed: {allowed}"


def fp8_unsupported_reason(capability: tuple[int, int] | None, head_dim: int) -> str | None:
    """None where the FP8 kernel runs (`capability` None: no GPU), else why not, one line."""
    if head_dim not in FP8_HEAD_DIMS:
        dims = " or ".join(map(str, FP8_HEAD_DIMS))
        return f"FP8 attention takes head_dim {dims}; got {head_dim}"
    if capability is None:
        return "FP8 attention runs on sm_90 (H100, H200) only; there is no GPU here"
    if tuple(capability) != FP8_CAPABILITY:
        have = arch_name(*capability)
        why = (
            "FP8 wgmma does not exist there (sm_89 has FP8 tensor cores through mma.sync only)"
            if tuple(capability) == (8, 9)
            else "its kernel is built on Hopper's FP8 wgmma, which it lacks"
        )
        return f"FP8 attention runs on sm_90 (H100, H200) only; this GPU is {have}: {why}"
    return None


def config_refusal(config) -> str | None:
    """bench-kernel.toml's `supports.check`: what the contract's keys cannot say (they apply
    to every dtype): FP8 configs need an sm_90 GPU and head_dim 128 or 256."""
    if config.dtype != FP8_DTYPE_NAME:
        return None
    return fp8_unsupported_reason(config.compute_capability, config.head_dim)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kernels.support COMPUTE_CAPABILITY (e.g. 8.9)", file=sys.stderr)
        return 2
    try:
        reason = unsupported_reason(*parse_capability(args[0]))
    except ValueError:
        print(f"not a compute capability: {args[0]!r}", file=sys.stderr)
        return 2
    if reason:
        print(reason)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
