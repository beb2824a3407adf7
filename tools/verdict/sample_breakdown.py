"""Where a worker's sample spends the wall time, by part, with no profiler in the way
(issue 48, item 6): a developer tool for the device machine. cProfile (bracket_profile.py)
slows every Python call, the host's handshake most; this wraps a few functions in a clock.

Runs bracket_profile's plan twice in one process, the same SDPA in process and as a user
kernel in its worker, and prints each wall, then for the worker run the time spent in each
wrapped part (total s, calls, mean ms). The parts nest: `_take` holds the sample's whole
host time, `bracket.sample` the bracket and the handshake before it (`request(call)`),
`gatherer` the row reads; `_keep` and `_compare` follow the bracket. In process,
`CudaClock._sample` is a sample.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bracket_profile import plan_of  # noqa: E402
from clocks import SPENT, wrap_all  # noqa: E402

from tests.gpu.test_worker_gpu import NATIVE_SDPA  # noqa: E402
from tests.unit.test_isolation import kernel_tree, run_whole  # noqa: E402


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
