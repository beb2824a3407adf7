"""Where a worker's sample spends the host's time (issue 48, item 6): a developer tool for
the device machine, run by tools/verdict/bracket_profile_device.sh.

Times one plan twice in this process, the same SDPA (fp16, native) either way: once as
a user kernel in its worker process (every sample bracketed by the harness, its rows
checked) and once as the registry's `sdpa`, in process; prints both walls, then the
worker run's cProfile, by own time and by cumulative time, written in full to
$OUT/bracket_profile.txt.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from results_schema import AttentionConfig  # noqa: E402
from tests.gpu.test_worker_gpu import NATIVE_SDPA, gpu_kernel, gpu_plan  # noqa: E402
from tests.unit.test_isolation import cpu_plan, kernel_tree, run_whole, user_kernel  # noqa: E402

CONFIGS = [  # name, batch, heads, seq, dim, causal: one graph-mode config, two single ones
    ("s128", 1, 1, 128, 64, False),
    ("s2048c", 4, 16, 2048, 64, True),
    ("s8192", 2, 16, 8192, 128, False),
]


def plan_of(candidate_is_worker: bool, root: Path):
    configs = [
        AttentionConfig(
            name=name, batch=b, heads=h, seq_len=s, head_dim=d, dtype="float32", causal=c
        )
        for name, b, h, s, d, c in CONFIGS
    ]
    if os.environ.get("DRY_RUN_ON_CPU"):
        configs = [c.model_copy(update={"seq_len": 64, "batch": 1, "heads": 2}) for c in configs]
    kernel = gpu_kernel("native", "native")
    plan = gpu_plan([kernel], configs, samples=int(os.environ.get("SAMPLES", "50")))
    if os.environ.get("DRY_RUN_ON_CPU"):  # the tool's own check, where there is no GPU
        plan = cpu_plan([user_kernel("native", "native")], plan.configs, plan.samples_per_config)
        plan = plan.model_copy(
            update={"configs": [c.model_copy(update={"dtype": "float32"}) for c in configs]}
        )
    update = {"placements": 10, "graph_below_us": 20.0}
    if not candidate_is_worker:
        update |= {"candidate": "sdpa", "compared_with": ["sdpa-flash"], "user_kernels": []}
    else:
        update |= {"compared_with": ["sdpa-flash"]}
    return plan.model_copy(update=update)


def main() -> None:
    from benches.user_kernel import register

    out = Path(os.environ.get("OUT", "/tmp"))
    root = Path(tempfile.mkdtemp())
    kernel_tree(root, "native", NATIVE_SDPA)
    walls = {}
    for label, worker in (("in-process", False), ("worker", True)):
        plan = plan_of(worker, root)
        register(plan, root)
        run_dir = root / label
        run_dir.mkdir()
        profile = cProfile.Profile() if worker else None
        start = time.perf_counter()
        if profile:
            profile.enable()
        run_whole(plan, run_dir)
        if profile:
            profile.disable()
        walls[label] = time.perf_counter() - start
        print(f"{label}: {walls[label]:.2f} s", flush=True)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(70)
    (out / "bracket_profile.txt").write_text(text.getvalue())
    print(text.getvalue()[:12000])
    print({k: round(v, 2) for k, v in walls.items()})


if __name__ == "__main__":
    main()
