"""Where a worker's sample spends the wall time, by part, with no profiler in the way
(issue 48, item 6): a developer tool for the device machine. cProfile (bracket_profile.py)
slows every Python call, the host's handshake most; this wraps a few functions in a clock.

Runs bracket_profile's plan twice in one process, the same SDPA in process and as a user
kernel in its worker, and prints each wall, then for the worker run the time spent in each
wrapped part (total s, calls, mean ms). The parts nest: `_take` holds the sample's whole
host time, `_once` the bracket, `request(call)` the handshake inside it, `gather` the row
reads; `_check` and `_compare` follow the bracket. In process, `CudaClock._sample` is a
sample.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bracket_profile import plan_of  # noqa: E402

from benches import bracket, cuda_ipc, isolation, row_checks, shared_buffers, timing  # noqa: E402
from tests.gpu.test_worker_gpu import NATIVE_SDPA  # noqa: E402
from tests.unit.test_isolation import kernel_tree, run_whole  # noqa: E402

SPENT: dict[str, list[float]] = collections.defaultdict(list)


def clocked(owner, name: str, label: str | None = None, by_first_arg: bool = False) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            key = label or name
            if by_first_arg and len(args) > 1:
                key = f"{key}({args[1]})"
            SPENT[key].append(time.perf_counter() - start)

    setattr(owner, name, wrapper)


def wrap_all() -> None:
    clocked(isolation.MeasuredPlacement, "_take")
    clocked(isolation.MeasuredPlacement, "_picks")
    clocked(isolation.MeasuredPlacement, "_check")
    clocked(isolation.MeasuredPlacement, "_compare")
    clocked(isolation, "fill_fresh")
    clocked(shared_buffers, "fill_fresh", "fill_fresh(module)")
    clocked(isolation.Worker, "request", by_first_arg=True)
    clocked(isolation.Worker, "finished")
    clocked(isolation.Worker, "settle")
    clocked(bracket.CudaBracket, "_once")
    clocked(bracket.CudaBracket, "sample", "bracket.sample")
    clocked(row_checks, "gather")
    clocked(row_checks, "reference")
    clocked(row_checks, "problems")
    clocked(timing.CudaClock, "_sample", "in-process _sample")
    clocked(timing.CudaClock, "flush")
    # A block's start and end (most of the default plan's extra benchmark time on an H200
    # lies in gaps of 15 ms or more between rows: tools/verdict/README.md, session 8).
    clocked(isolation.MeasuredPlacement, "__init__", "placement made")
    clocked(isolation.MeasuredPlacement, "_ready", "placement ready (place reply)")
    clocked(isolation.MeasuredPlacement, "drop", "placement dropped")
    clocked(isolation.CalibrationSamples, "__call__", "calibration (a block's)")
    clocked(isolation.Worker, "free_later")
    clocked(shared_buffers.Lender, "lend_copies")
    clocked(cuda_ipc.Mappings, "_open", "ipc open (parent)")
    clocked(bracket.Calibration, "overhead_ms")


def main() -> None:
    from benches.user_kernel import register

    root = Path(tempfile.mkdtemp())
    kernel_tree(root, "native", NATIVE_SDPA)
    wrap_all()
    walls = {}
    for label, worker in (("in-process", False), ("worker", True)):
        SPENT.clear()
        plan = plan_of(worker, root)
        register(plan, root)
        run_dir = root / label
        run_dir.mkdir()
        start = time.perf_counter()
        run_whole(plan, run_dir)
        walls[label] = time.perf_counter() - start
        print(f"\n{label}: {walls[label]:.2f} s")
        print(f"{'part':<28} {'total s':>8} {'calls':>7} {'mean ms':>8} {'median ms':>9}")
        for key, times in sorted(SPENT.items(), key=lambda kv: -sum(kv[1])):
            ordered = sorted(times)
            print(
                f"{key:<28} {sum(times):8.3f} {len(times):7d} "
                f"{1e3 * sum(times) / len(times):8.3f} {1e3 * ordered[len(ordered) // 2]:9.3f}"
            )
    out = Path(os.environ.get("OUT", "/tmp"))
    (out / "walls.txt").write_text(repr(walls))


if __name__ == "__main__":
    main()
