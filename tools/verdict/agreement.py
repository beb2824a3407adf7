"""Tables the runs tools/verdict/agreement_device.sh made (developer tool): each launch's
phase times, and per config our kernel's median sample (`latency_ms`: on the GPU its own
events, checked), the harness's median figure for the same calls (`harness_ms`: its bracket
less the calibration), their ratio, and the old tree's median sample.

    OLD_LABELS="old2 old" python3 tools/verdict/agreement.py WORK_DIR

OLD_LABELS: the other launches' labels (default "old"); the first is compared per config.
IDENTITY: the implementation compared (default "flash", our kernel; an example's name).
"""

from __future__ import annotations

import collections
import csv
import datetime
import glob
import json
import os
import statistics
import sys
from collections import defaultdict


def run_dir(work: str, label: str) -> str | None:
    found = sorted(glob.glob(os.path.join(work, f"{label}-results", "*", "manifest.json")))
    return os.path.dirname(found[-1]) if found else None


def medians(run: str, identity: str) -> dict[str, tuple[float, float | None, int, str]]:
    """config -> (median sample, median harness figure or None, samples, mode)."""
    latency, harness, mode = defaultdict(list), defaultdict(list), {}
    with open(os.path.join(run, "results", "measurements.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["implementation"] != identity:
                continue
            latency[row["config"]].append(float(row["latency_ms"]))
            if row.get("harness_ms"):
                harness[row["config"]].append(float(row["harness_ms"]))
            mode[row["config"]] = row["mode"]
    return {
        c: (
            statistics.median(xs),
            statistics.median(harness[c]) if harness[c] else None,
            len(xs),
            mode[c],
        )
        for c, xs in latency.items()
    }


def phases(run: str) -> str:
    manifest = json.load(open(os.path.join(run, "manifest.json")))
    return ", ".join(f"{p['name']} {p.get('seconds', 0):.1f}" for p in manifest.get("phases", []))


def spacing(run: str) -> str:
    """The measurements' span, and the time since the row before summed by the row's
    implementation and mode: where the benchmark phase's time went."""
    with open(os.path.join(run, "results", "measurements.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    stamps = [datetime.datetime.fromisoformat(r["timestamp"]) for r in rows]
    spent: dict[str, float] = collections.defaultdict(float)
    for row, before, stamp in zip(rows[1:], stamps, stamps[1:], strict=False):
        spent[f"{row['implementation']}/{row['mode']}"] += (stamp - before).total_seconds()
    parts = ", ".join(f"{key} {seconds:.2f}" for key, seconds in sorted(spent.items()))
    return f"span {(stamps[-1] - stamps[0]).total_seconds():.2f} s: {parts}"


def main() -> None:
    work = sys.argv[1]
    labels = ["new", *os.environ.get("OLD_LABELS", "old").split()]
    all_runs = {label: run_dir(work, label) for label in labels}
    for label, run in all_runs.items():
        print(f"{label}: {run}\n  phases (s): {phases(run) if run else 'no run'}")
        if run:
            print(f"  measurements: {spacing(run)}")
    runs = {"new": all_runs["new"], "old": all_runs[labels[1]]}
    if not runs["new"]:
        return
    identity = os.environ.get("IDENTITY", "flash")
    new = medians(runs["new"], identity)
    old = medians(runs["old"], identity) if runs["old"] else {}
    print(
        f"\n{'config':32} {'mode':6} {'sample ms':>10} {'harness':>9} {'h/s':>6} {'old ms':>9} {'new/old':>7}"  # noqa: E501 (a table's row)
    )
    ratios_own, ratios_old = [], []
    for config, (ms, own, _n, mode) in new.items():
        old_ms = old.get(config, (None,))[0]
        r_own = own / ms if own else None
        r_old = ms / old_ms if old_ms else None
        if ms >= 0.1:
            ratios_own += [r_own] if r_own else []
            ratios_old += [r_old] if r_old else []
        print(
            f"{config:32} {mode:6} {ms:10.4f} {own or float('nan'):9.4f} {r_own or float('nan'):6.3f} "  # noqa: E501 (a table's row)
            f"{old_ms or float('nan'):9.4f} {r_old or float('nan'):7.3f}"
        )
    for name, xs in (("harness/sample", ratios_own), ("new/old", ratios_old)):
        if xs:
            print(
                f"configs of 0.1 ms or more, {name}: median {statistics.median(xs):.4f}, "
                f"range {min(xs):.4f}-{max(xs):.4f} ({len(xs)} configs)"
            )


if __name__ == "__main__":
    main()
