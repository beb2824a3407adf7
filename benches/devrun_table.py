"""Developer tool: phase times, samples per implementation and run-to-run median agreement
of two fetched runs (used by devrun_e2e.sh)."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path


def load(run_dir: Path) -> tuple[dict, dict, Counter]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    with open(run_dir / "results" / "summary.csv", newline="") as f:
        medians = {
            (r["config"], r["implementation"]): float(r["median_ms"]) for r in csv.DictReader(f)
        }
    with open(run_dir / "results" / "measurements.csv", newline="") as f:
        samples = Counter(r["implementation"] for r in csv.DictReader(f))
    return manifest, medians, samples


def main(a: str, b: str) -> None:
    (ma, meda, sa), (mb, medb, sb) = load(Path(a)), load(Path(b))
    for name, manifest, samples in (("A", ma, sa), ("B", mb, sb)):
        phases = " ".join(f"{p['name']}={p['seconds']:.0f}s" for p in manifest["phases"])
        print(f"run {name} {manifest['run_id']} {manifest['status']}: {phases}")
        print(f"  samples per implementation: {dict(samples)}")
    diffs = sorted(((abs(medb[k] - meda[k]) / meda[k], k) for k in meda if k in medb), reverse=True)
    print(
        f"back-to-back median difference: max {100 * diffs[0][0]:.2f}% at {diffs[0][1]}, "
        f"median {100 * diffs[len(diffs) // 2][0]:.2f}% over {len(diffs)} (config, impl)"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
