"""Issue 49 item 4 on this machine's CPU: SDPA as a user kernel in its worker process against the
registry's SDPA in the harness's own process, one run of the harness, configs of 0.1 ms and up;
prints per config the parent's median, the harness's median for the worker, their ratio and the
worker's own clock's median over the parent's. Run it on a quiet machine, with the environment
under test set around it (the run sets each process's intra-op threads itself,
benches/cpu_threads.py, keeping a smaller OMP_NUM_THREADS); it prints the threads in force and
how loaded the host was before and after (the share of a busy thread's time spent waiting for a
core):

    .venv/bin/python tools/verdict/cpu_agreement.py [SAMPLES]
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python tools/verdict/cpu_agreement.py

Developer-only (it borrows the isolation tests' helpers)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SHAPES = [(1, 2, 128), (1, 4, 256), (1, 4, 512), (1, 8, 512), (2, 8, 512), (1, 8, 1024)]


def main() -> None:
    from benches import registry
    from benches.user_kernel import register
    from benches.writers import read_csv
    from results_schema import Measurement
    from tests.unit import test_isolation as ti
    from tests.unit.test_cpu_threads import fp32_configs, waiting_fraction

    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    root = Path(tempfile.mkdtemp())
    ti.kernel_tree(root, "worker", "")  # SDPA in float32, as the registry's
    configs = fp32_configs(SHAPES)
    plan = ti.cpu_plan([ti.user_kernel("worker", "worker")], configs, samples=samples)
    register(plan, root)
    before = waiting_fraction()
    try:
        ti.run_whole(plan, root / "run")
    finally:
        impl = registry.IMPLEMENTATIONS.pop("worker", None)
        if getattr(impl, "worker", None) is not None:
            impl.worker.close()
    after = waiting_fraction()
    rows = read_csv(root / "run" / "results" / "measurements.csv", Measurement)
    threads = json.loads((root / "run" / "environment.json").read_text()).get("cpu_threads")
    print(f"cpu_threads {threads}; a busy thread waited {before:.0%} before, {after:.0%} after")
    print(f"{'config':<12} {'parent ms':>10} {'worker ms':>10} {'ratio':>7} {'own':>7}  mode")
    for config in configs:
        mine = [r for r in rows if r.config == config.name]
        parent = statistics.median(r.latency_ms for r in mine if r.implementation == "sdpa")
        theirs = [r for r in mine if r.implementation == "worker"]
        worker = statistics.median(r.latency_ms for r in theirs)
        mode = theirs[0].mode if theirs else ""
        own = statistics.median(r.reported_ms for r in theirs if r.reported_ms is not None)
        print(
            f"{config.name:<12} {parent:>10.4f} {worker:>10.4f} {worker / parent:>7.3f} "
            f"{own / parent:>7.3f}  {mode}"
        )


if __name__ == "__main__":
    main()
