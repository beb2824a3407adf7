"""`python -m benches`: the payload's command line (run by the startup script, or by hand).

    python -m benches plans
    python -m benches environment --out environment.json
    python -m benches correctness --plan auto --out runs/demo
    python -m benches run --plan auto --out runs/demo --measurements 600 \
        --status-file runs/demo/status.json

--out is the run directory: CSVs go to DIR/results/, plan.json, environment.json and (after a
complete `run`) manifest.json to DIR itself, the layout fetch and `bench report` read.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benches.plan import PlanError, load_plan_file, plan_names, resolve_plan
from benches.writers import ResultsChanged
from results_schema.names import new_run_id

EXIT_USAGE = 2
EXIT_RESULTS_CHANGED = 1  # the run failed: its results are not what the harness wrote


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("plans", help="list the shipped plans")
    env = sub.add_parser("environment", help="write the environment fingerprint as JSON")
    env.add_argument("--out", type=Path, required=True, help="JSON file to write")
    for name, text in (
        ("correctness", "run the correctness gate only (results/correctness.csv)"),
        ("run", "correctness gate (reused if already done), then timing, summary and manifest"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--plan", default="auto", help="plan name, plan file, or auto (default)")
        cmd.add_argument("--out", type=Path, required=True, help="run directory")
        cmd.add_argument(
            "--run-id", help="defaults to the id of an earlier phase in --out, or a new one"
        )
        cmd.add_argument(
            "--status-file", type=Path, help="status.json to keep current (none if absent)"
        )
        cmd.add_argument(
            "--config",
            action="append",
            metavar="NAME",
            help="only this config of the plan (repeatable): a row's repro command",
        )
        cmd.add_argument(
            "--implementation",
            action="append",
            metavar="IDENTITY",
            help="only this identity of the plan (repeatable): a row's repro command",
        )
    run = sub.choices["run"]
    run.add_argument(
        "--measurements",
        type=int,
        help="timed samples per implementation over the whole plan (spread over its configs)",
    )
    run.add_argument(
        "--phases-file",
        type=Path,
        help="phases.tsv of the startup script: append the correctness and benchmark lines "
        "(their seconds and exit code 0) as each ends",
    )
    run.add_argument(
        "--phase-started",
        type=float,
        help="when the script's phase began (seconds since the epoch): the gate's line "
        "counts from there (default: now)",
    )
    run.add_argument(
        "--sample-until",
        type=float,
        help="seconds since the epoch after which no look of the timing may end (the run's "
        "time cap less what follows the timing: the startup script's); default: no bound "
        "but the plan's",
    )
    run.add_argument(
        "--margin",
        type=float,
        help="the margin δ of every verdict, replacing the plan's: slower needs the speedup "
        "interval below 1-δ, not-slower its low end at or above 1-δ (e.g. 0.02)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "plans":
            return list_plans()
        if args.command == "environment":
            return write_environment(args.out)
        return run_phases(args)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ResultsChanged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RESULTS_CHANGED


def list_plans() -> int:
    from benches.plan import PLANS_DIR

    for name in plan_names():
        plan = load_plan_file(PLANS_DIR / f"{name}.json")
        impls = ", ".join(plan.implementations)
        print(
            f"{name:12} {plan.device:4} {len(plan.configs):3} configs x "
            f"{plan.samples_per_config} samples  [{impls}]"
        )
        print(f"{'':12} {plan.description}")
    return 0


def write_environment(out: Path) -> int:
    from benches.environment import fingerprint

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(fingerprint().model_dump_json(indent=2) + "\n", encoding="utf-8")
    return 0


def effective_plan(plan, measurements: int | None, margin: float | None = None):
    """The plan as run: --measurements replaces samples_per_config (its even share),
    --margin the margin."""
    from benches.plan import samples_per_config

    update = {}
    if measurements is not None:
        counts = samples_per_config(plan, measurements)  # raises PlanError when too few
        update["samples_per_config"] = min(counts)
    if margin is not None:
        if not 0 <= margin < 1:
            raise PlanError(f"--margin {margin} must be at least 0 and below 1")
        update["margin"] = margin
    return plan.model_copy(update=update)


def run_phases(args: argparse.Namespace) -> int:
    # The kernels' workers first: their `import torch` overlaps the one below.
    from benches.cpu_threads import set_environment
    from benches.worker_start import prestart

    resolved = resolve_plan(args.plan)
    # The workers' environment is taken now: their intra-op threads first.
    set_environment(resolved.device)
    prestart(resolved, args.implementation or resolved.identities)
    # torch is imported here, not at the top: `plans` and `--help` stay instant.
    from benches.long_lived import imported_for_good

    with imported_for_good():
        from benches import runner
        from benches.user_kernel import register
        from benches.writers import PhaseClock, StatusWriter

    measurements = getattr(args, "measurements", None)
    plan = effective_plan(resolved, None, getattr(args, "margin", None))
    selection = runner.Selection(
        frozenset(args.config) if args.config else None,
        frozenset(args.implementation) if args.implementation else None,
    )
    unknown = sorted(
        ({*(args.config or ())} - {c.name for c in plan.configs})
        | ({*(args.implementation or ())} - set(plan.identities))
    )
    if unknown:
        print(f"error: not in plan {plan.name!r}: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    register(plan)
    effective = effective_plan(plan, measurements)
    try:
        runner.require_device(plan)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    started_at = datetime.now(timezone.utc)
    phases = PhaseClock(getattr(args, "phases_file", None), getattr(args, "phase_started", None))
    args.out.mkdir(parents=True, exist_ok=True)
    run_id = args.run_id or earlier_run_id(args.out) or new_run_id()
    with runner.StopRequested() as stop:
        ctx = runner.RunContext(
            plan, args.out, run_id, StatusWriter(args.status_file, run_id), stop, selection
        )
        runner.write_plan(args.out, effective)
        environment = runner.load_or_write_environment(args.out)
        gate = None if args.command == "correctness" else runner.reusable_correctness(ctx)
        if gate is None:
            gate = runner.run_correctness(ctx)
        if args.command == "correctness" or stop():
            return stop.exit_code
        phases.ended("correctness")
        until = getattr(args, "sample_until", None)
        seconds_left = until - time.time() if until is not None else None
        _, summary = runner.run_benchmark(ctx, gate, measurements, environment, seconds_left)
        if stop():
            return stop.exit_code
        if plan.profile is not None:
            runner.run_profile(ctx, gate)
        from benches.writers import write_manifest

        write_manifest(args.out, run_id, started_at)
        print_summary(summary, plan.margin)
        print_comparison(args.out)
        phases.ended("benchmark")
    return 0


def earlier_run_id(run_dir: Path) -> str | None:
    """The run id that an earlier `correctness` phase wrote into this run directory."""
    import csv

    path = run_dir / "results" / "correctness.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        first = next(csv.DictReader(f), None)
    return first["run_id"] if first else None


def print_comparison(run_dir: Path) -> None:
    """Each compared identity across all configs (comparison.json), A/B first."""
    import json

    path = run_dir / "comparison.json"
    for item in json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []:
        print(
            f"overall: {item['versus']} over {item['identity']}: geometric mean "
            f"{item['geomean']:.4f}x [{item['ci_low']:.4f}, {item['ci_high']:.4f}] "
            f"{item['verdict']} ({item['configs']} configs)"
        )


def print_summary(summary, margin: float) -> None:
    print(
        f"verdicts read the speedup interval against [1-δ, 1+δ], δ = {margin:g}: slower below, "
        "not-slower from 1-δ up, undecided across 1-δ (results_schema/verdicts.py)"
    )
    for row in summary:
        speedup = (
            f"  {row.speedup:.3f}x over {row.versus} "
            f"[{row.speedup_ci_low:.3f}, {row.speedup_ci_high:.3f}] {row.verdict or row.flag}"
            if row.speedup is not None
            else (f"  {row.flag}" if row.flag else "")
        )
        print(
            f"{row.config:28} {row.implementation:15} {row.mode:6} median {row.median_ms:.4f} ms "
            f"{row.tflops:8.2f} TFLOP/s{speedup}"
        )
