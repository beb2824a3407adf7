"""Where the correctness gate's time goes (developer tool, needs a GPU).

    python tools/profile_gate.py [--plan default] [--passes 2]

Wraps the gate's steps with synchronizing timers and runs the plan's gate `passes` times
in one process (the first pass is what a run pays: it includes first-call costs such as
library loads and per-shape plan building). Prints seconds per step, per pass.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from functools import wraps

import torch

from benches import correctness
from benches.plan import resolve_plan

STEPS = ("make_inputs", "chunked_reference", "_measure", "errors", "graph_probe")


def instrument(totals: dict[str, float]) -> None:
    for step in STEPS:
        original = getattr(correctness, step)

        def timed(*args, _original=original, _step=step, **kwargs):
            torch.cuda.synchronize()
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                torch.cuda.synchronize()
                key = _step
                if _step in ("_measure", "graph_probe") and args and isinstance(args[0], str):
                    key = f"{_step}:{args[0]}"
                totals[key] += time.perf_counter() - started

        setattr(correctness, step, wraps(original)(timed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", default="default")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    plan = resolve_plan(args.plan)
    device = torch.device("cuda")
    for number in range(args.passes):
        totals: dict[str, float] = defaultdict(float)
        if number == 0:
            instrument(totals)
            first_totals = totals
        else:
            first_totals.clear()
            totals = first_totals
        started = time.perf_counter()
        per_config = []
        for index, config in enumerate(plan.configs):
            t0 = time.perf_counter()
            rows = correctness.check_config("profile", config, plan, index, device)
            torch.cuda.synchronize()
            per_config.append((config.name, time.perf_counter() - t0, all(r.passed for r in rows)))
            torch.cuda.empty_cache()
        wall = time.perf_counter() - started
        print(f"pass {number + 1}: gate {wall:.2f} s")
        for name, seconds, passed in per_config:
            print(f"  {name:28} {seconds:6.2f} s {'passed' if passed else 'FAILED'}")
        for step, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"  step {step:34} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
