"""Verdict statistics over run directories (developer tool; numpy and the schema only).

    python tools/verdict_table.py RUN_DIR [RUN_DIR ...]

Per run: the A/A control's verdicts (false positives = faster/slower), its interval widths,
each baseline's verdicts and speedups by config, the benchmark phase's seconds from the
manifest; then totals over all runs, and verdicts recomputed at other margins from the
same intervals (a verdict is a function of the interval and δ alone).
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches.stats import verdict  # noqa: E402
from results_schema import Manifest, Plan, SummaryRow  # noqa: E402
from results_schema.csvio import read_rows  # noqa: E402

MARGINS = (0.0, 0.005, 0.01, 0.015, 0.02)


def load(run_dir: Path):
    summary = read_rows(run_dir / "results" / "summary.csv", SummaryRow)
    path = run_dir / "manifest.json"
    manifest = Manifest.model_validate_json(path.read_text()) if path.is_file() else None
    if manifest and manifest.plan:
        return manifest.plan, summary, manifest
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    return plan, summary, manifest


def half_width(row: SummaryRow) -> float:
    return (row.speedup_ci_high - row.speedup_ci_low) / 2 / row.speedup


def main(run_dirs: list[str]) -> None:
    control_rows: list[SummaryRow] = []
    by_baseline: dict[str, list[SummaryRow]] = defaultdict(list)
    for run_dir in map(Path, run_dirs):
        plan, summary, manifest = load(run_dir)
        phases = {p.name: p.seconds for p in manifest.phases} if manifest else {}
        print(
            f"run {run_dir.name} plan {plan.name}: δ={plan.margin:g}, placements "
            f"{plan.placements}, phases " + ", ".join(f"{n} {s:.1f} s" for n, s in phases.items())
        )
        for row in summary:
            if row.speedup is None:
                continue
            seq = next(c.seq_len for c in plan.configs if c.name == row.config)
            print(
                f"  {row.config:28} S={seq:<5} {row.implementation:14} vs {row.versus:6} "
                f"{row.speedup:.4f} [{row.speedup_ci_low:.4f}, {row.speedup_ci_high:.4f}] "
                f"±{100 * half_width(row):.2f}% {row.verdict or row.flag}"
            )
            if row.implementation == plan.control_identity:
                control_rows.append(row)
            else:
                by_baseline[row.implementation].append((seq, row))
    if control_rows:
        counts = Counter(r.verdict for r in control_rows)
        wrong = counts["faster"] + counts["slower"]
        widths = sorted(100 * half_width(r) for r in control_rows)
        print(
            f"A/A control: {len(control_rows)} verdicts, {wrong} faster/slower "
            f"({100 * wrong / len(control_rows):.1f}%): {dict(counts)}; interval half-width "
            f"median ±{widths[len(widths) // 2]:.2f}%, range ±{widths[0]:.2f}-{widths[-1]:.2f}%"
        )
        for margin in MARGINS:
            recount = Counter(
                verdict(r.speedup_ci_low, r.speedup_ci_high, margin) for r in control_rows
            )
            print(f"  at δ={margin:<6g} {dict(recount)}")
    for name, rows in by_baseline.items():
        large = [r for s, r in rows if s >= 1024]
        counts = Counter(r.verdict for r in large)
        speedups = sorted(r.speedup for r in large)
        print(
            f"{name}: S >= 1024: {len(large)} verdicts {dict(counts)}; measured slowdown "
            f"{100 * (speedups[0] - 1):.1f}%..{100 * (speedups[-1] - 1):.1f}%"
            if large
            else f"{name}: no S >= 1024 rows"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
