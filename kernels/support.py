"""Which GPUs our kernel runs on, decided from the compute capability alone (no torch), so
the build phase (nvidia-smi's compute_cap) and the registry (torch's) give one answer.

The kernel uses bf16 tensor cores and cp.async, which start with sm_80 (Ampere); a T4
(sm_75) runs the SDPA baselines only, and its results say `flash: unsupported on sm_75`.

    python -m kernels.support 7.5    # prints "unsupported on sm_75", exits 1
"""

from __future__ import annotations

import sys

MIN_CAPABILITY = (8, 0)


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
