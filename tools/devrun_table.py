"""Developer tool: phase times, samples per implementation and run-to-run median agreement
of two fetched runs, with each config's median SM clock and temperature (used by
devrun_e2e.sh)."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path
from statistics import median


def load(run_dir: Path) -> tuple[dict, dict, Counter]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    with open(run_dir / "results" / "summary.csv", newline="") as f:
        medians = {
            (r["config"], r["implementation"]): float(r["median_ms"]) for r in csv.DictReader(f)
        }
    with open(run_dir / "results" / "measurements.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    samples = Counter(r["implementation"] for r in rows)
    state: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["sm_clock_mhz"]:
            state.setdefault(r["config"], []).append(
                (float(r["sm_clock_mhz"]), float(r["temperature_c"]))
            )
    gpu = {
        c: (median(x[0] for x in reads), median(x[1] for x in reads)) for c, reads in state.items()
    }
    return manifest, medians, samples, gpu


def main(a: str, b: str) -> None:
    (ma, meda, sa, ga), (mb, medb, sb, gb) = load(Path(a)), load(Path(b))
    for name, manifest, samples in (("A", ma, sa), ("B", mb, sb)):
        phases = " ".join(f"{p['name']}={p['seconds']:.0f}s" for p in manifest["phases"])
        print(f"run {name} {manifest['run_id']} {manifest['status']}: {phases}")
        print(f"  samples per implementation: {dict(samples)}")
    for config in ga.keys() & gb.keys():
        moved = [abs(medb[k] - meda[k]) / meda[k] for k in meda if k[0] == config and k in medb]
        print(
            f"  {config:28} max median diff {100 * max(moved):5.2f}%  SM clock A/B "
            f"{ga[config][0]:.0f}/{gb[config][0]:.0f} MHz  temp A/B "
            f"{ga[config][1]:.0f}/{gb[config][1]:.0f} C"
        )
    diffs = sorted(((abs(medb[k] - meda[k]) / meda[k], k) for k in meda if k in medb), reverse=True)
    print(
        f"back-to-back median difference: max {100 * diffs[0][0]:.2f}% at {diffs[0][1]}, "
        f"median {100 * diffs[len(diffs) // 2][0]:.2f}% over {len(diffs)} (config, impl)"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
