"""The table of tools/verdict/recipe_aa.sh: per run, the gate's outcome, the A/A control's
speedup over its twin, the candidate's over its baseline per config, and per config how
often each twin came right after the other (the rounds' order: benches/round_order.py)."""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def medians(rows: list[dict]) -> dict[tuple[str, str], float]:
    by: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        by.setdefault((r["config"], r["implementation"]), []).append(float(r["latency_ms"]))
    return {k: statistics.median(v) for k, v in by.items()}


def main(out: Path) -> None:
    controls, after = [], Counter()
    for gate in sorted(out.glob("run_*/*0/results/*/gate.json")):
        report = json.loads(gate.read_text())
        rows = list(csv.DictReader((gate.parent / "results" / "measurements.csv").open()))
        median = medians(rows)
        for before, row in zip(rows, rows[1:], strict=False):
            if before["config"] == row["config"]:
                after[(row["config"], before["implementation"], row["implementation"])] += 1
        control = report["control"]["speedup"] if report.get("control") else float("nan")
        controls.append(control)
        configs = sorted({r["config"] for r in rows})
        base, cand = "torch-attention@baseline", "torch-attention"
        ab = [median[(c, base)] / median[(c, cand)] for c in configs]
        print(
            f"{gate.parts[-5]:10} exit {report['exit_code']}  control {control:.3f}  "
            f"A/B {' '.join(f'{x:.2f}' for x in ab)}  slower: {report['slower_configs']}"
        )
    below = sum(c < 1 for c in controls)
    print(f"control: mean {statistics.mean(controls):.3f}, under 1 in {below} of {len(controls)}")
    for config in sorted({k[0] for k in after}):
        print(
            f"{config:28} twin after sdpa {after[(config, 'sdpa', 'sdpa@aa')]:4}, "
            f"sdpa after twin {after[(config, 'sdpa@aa', 'sdpa')]:4}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
