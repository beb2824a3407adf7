"""What ncu runs for one profile: warm one implementation up, then one call in the profiler's
range (cudaProfilerStart/Stop), so only that call's kernels are profiled.

    ncu --profile-from-start off ... python -m benches.profile_target \
        --plan plan.json --config NAME --identity IMPL
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

WARMUP_CALLS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, required=True, help="the run's plan.json")
    parser.add_argument("--config", required=True, help="a config name of the plan")
    parser.add_argument("--identity", required=True, help="an implementation of the plan")
    args = parser.parse_args(argv)

    import torch

    from benches import correctness, fp8, registry
    from benches.plan import load_plan_file
    from benches.user_kernel import register
    from results_schema.models import implementation_of

    plan = load_plan_file(args.plan)
    register(plan, isolated=False)  # this process is the one kernel's already
    index = next(i for i, c in enumerate(plan.configs) if c.name == args.config)
    config = plan.configs[index]
    device = torch.device("cuda")
    inputs = correctness.make_inputs(
        config, device, correctness.config_seed(plan.seed, index, "profile")
    )
    descales = fp8.descales_of(inputs)  # an FP8 config's q_descale, k_descale, v_descale
    impl = registry.get(implementation_of(args.identity))
    q, k, v = impl.native_inputs(inputs)  # in the layout its kernel takes, as when timed
    run = impl.run
    for _ in range(WARMUP_CALLS):  # library loads, plan builds, autotuning: not profiled
        run(q, k, v, config.causal, **descales)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run(q, k, v, config.causal, **descales)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
