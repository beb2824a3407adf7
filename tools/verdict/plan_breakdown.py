"""Where a real run's benchmark phase spends its wall time, by part (issue 48, item 6): a
developer tool for the device machine. Re-runs `python -m benches run` on the plan and the
built payload of a finished local launch (its sandbox folder), in this process, with
clocks.py's clocks on the parent's parts plus a block's (its placements, its warm
rounds, its calibration), and prints each part's total, calls and median.

    python3 tools/verdict/plan_breakdown.py STATE/sandboxes/RUN OUT_DIR
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sandbox, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
sys.path.insert(0, str(sandbox / "payload"))  # its benches and its built kernel
sys.path.insert(1, str(Path(__file__).resolve().parent))

from clocks import SPENT, clocked, wrap_all  # noqa: E402

from benches import cli, placement, runner, timing  # noqa: E402


def main() -> None:
    wrap_all()
    clocked(placement, "build", "block: placements (all identities)")
    clocked(timing, "settle", "block: warm rounds (all identities)")
    clocked(runner, "prepare_config", "config: prepare (warm-up, mode)")
    clocked(runner, "run_benchmark", "benchmark phase")
    os.chdir(sandbox / "payload")
    start = time.perf_counter()
    code = cli.main(["run", "--plan", str(sandbox / "plan.json"), "--out", str(out)])
    print(f"\nexit {code}, {time.perf_counter() - start:.2f} s in all")
    print(f"{'part':<40} {'total s':>8} {'calls':>7} {'median ms':>9}")
    for key, times in sorted(SPENT.items(), key=lambda kv: -sum(kv[1])):
        ordered = sorted(times)
        median = 1e3 * ordered[len(ordered) // 2]
        print(f"{key:<40} {sum(times):8.3f} {len(times):7d} {median:9.3f}")


if __name__ == "__main__":
    main()
