"""On a GPU host: does the kernel contract's path (a worker process per kernel tree,
benches/isolation.py) add overhead? Our kernel is timed twice in one run of the default
plan's configs: in the harness's process ('flash'), and through a contract tree whose entry
point calls the very same binding and library, in its worker process ('flash-worker').
Every config should be judged equivalent.

    PYTHONPATH=/tmp/site python3 tools/contract_overhead_device.py OUT_DIR [--measurements N]

Writes OUT_DIR/overhead/ (the run directory) and prints one line per config last.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from results_schema import Plan  # noqa: E402
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel  # noqa: E402

TREE = "flashwrap"  # beside benches/, as a payload holds a user's tree
ENTRY = '''"""Our kernel, declared through the contract: the same binding and library."""

from kernels.flash_attention import flash_attention


def attention(q, k, v, *, causal, scale):
    return flash_attention(q, k, v, causal=causal)
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--measurements", type=int, default=600)
    args = parser.parse_args()
    package = REPO / TREE / "flashwrap"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "entry.py").write_text(ENTRY)
    contract = KernelContract(
        name="flash-worker",
        entry="flashwrap.entry:attention",
        supports={"dtypes": ["float16", "bfloat16"], "gqa": True, "head_dims": [64, 128, 256]},
    )
    digest = hashlib.sha256(ENTRY.encode()).hexdigest()
    kernel = UserKernel(
        identity="flash-worker",
        directory=TREE,
        contract=contract,
        source=KernelIdentity(tree_sha256=digest),
    )
    default = Plan.model_validate_json((REPO / "benches/plans/default.json").read_text())
    plan = default.model_copy(
        update={
            "name": "contract-overhead",
            "candidate": "flash-worker",
            "compared_with": ["flash"],
            "control": None,
            "user_kernels": [kernel],
        }
    )
    plan = Plan.model_validate(plan.model_dump())
    args.out.mkdir(parents=True, exist_ok=True)
    plan_file = args.out / "plan.json"
    plan_file.write_text(plan.model_dump_json(indent=1))
    run_dir = args.out / "overhead"
    command = [sys.executable, "-m", "benches", "run", "--plan", str(plan_file)]
    command += ["--out", str(run_dir), "--measurements", str(args.measurements)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    (args.out / "overhead.log").write_text(done.stdout + done.stderr)
    print(done.stderr[-1500:])
    if done.returncode != 0:
        print(f"benches run: exit {done.returncode}")
        return done.returncode
    verdicts = []
    with open(run_dir / "results" / "summary.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["implementation"] == "flash":
                verdicts.append(row["verdict"])
                print(
                    f"{row['config']:32} flash {float(row['median_ms']):.4f} ms  worker/in-process "
                    f"{row['speedup']} [{row['speedup_ci_low']}, {row['speedup_ci_high']}] "
                    f"{row['verdict'] or row['flag']}"
                )
    print(f"equivalent: {verdicts.count('equivalent')}/{len(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
