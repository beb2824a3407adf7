"""Tables the runs tools/verdict/agreement_device.sh made (developer tool): each launch's
phase times, and per config our kernel's median sample (`latency_ms`: on the GPU its own
events, checked), the harness's median figure for the same calls (`harness_ms`: its bracket
less the calibration), their ratio, and the old tree's median sample.

    OLD_LABELS="old2 old" python3 tools/verdict/agreement.py WORK_DIR

OLD_LABELS: the other launches' labels (default "old"); the first is compared per config,
in the last run of each and, where each label launched more than once, over every run.
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


def run_dirs(work: str, label: str) -> list[str]:
    """Every run of `label`, oldest first (run ids sort by their start)."""
    found = sorted(glob.glob(os.path.join(work, f"{label}-results", "*", "manifest.json")))
    return [os.path.dirname(path) for path in found]


def run_dir(work: str, label: str) -> str | None:
    runs = run_dirs(work, label)
    return runs[-1] if runs else None


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


def span_seconds(run: str) -> float:
    with open(os.path.join(run, "results", "measurements.csv"), newline="") as f:
        stamps = [datetime.datetime.fromisoformat(r["timestamp"]) for r in csv.DictReader(f)]
    return (max(stamps) - min(stamps)).total_seconds()


def phase_seconds(run: str, name: str) -> float | None:
    manifest = json.load(open(os.path.join(run, "manifest.json")))
    found = [p.get("seconds") for p in manifest.get("phases", []) if p["name"] == name]
    return found[0] if found else None


def walls(work: str) -> dict[str, list[float]]:
    """label -> its launches' wall times (walls.txt, in launch order)."""
    found: dict[str, list[float]] = collections.defaultdict(list)
    path = os.path.join(work, "walls.txt")
    if os.path.exists(path):
        for line in open(path):
            label, _, rest = line.partition(":")
            found[label.strip()].append(float(rest.split(" in ")[1].split()[0]))
    return found


def over_runs(work: str, labels: list[str], identity: str) -> None:
    """With several launches a label (ORDER="new old2 new old2 ..."): each label's launch
    walls, benchmark phases and measurement spans, and their medians' ratio to the first
    label's; per config, the median over runs of each run's median sample, and its ratio
    (a ratio holds within one process: across processes, medians of several)."""
    runs = {label: run_dirs(work, label) for label in labels}
    if min(len(r) for r in runs.values()) < 2:
        return
    launch = walls(work)
    print(f"\nover every run ({', '.join(f'{k} {len(v)}' for k, v in runs.items())}):")
    figures = {
        "launch wall": {label: launch.get(label, []) for label in labels},
        "benchmark phase": {
            label: [x for x in (phase_seconds(r, "benchmark") for r in rs) if x is not None]
            for label, rs in runs.items()
        },
        "measurements' span": {label: [span_seconds(r) for r in rs] for label, rs in runs.items()},
    }
    first, second = labels[0], labels[1]
    for name, by_label in figures.items():
        if not by_label[first] or not by_label[second]:
            continue
        ratio = statistics.median(by_label[first]) / statistics.median(by_label[second])
        each = "; ".join(f"{k} {' / '.join(f'{x:.1f}' for x in v)}" for k, v in by_label.items())
        print(f"  {name}: {each} s; medians' ratio {ratio:.3f}")
    per_run = {label: [medians(r, identity) for r in rs] for label, rs in runs.items()}
    ratios = []
    heading = f"  {'config':32} {first + ' ms':>10} {second + ' ms':>10} {'ratio':>6}"
    print(heading + " (medians over runs)")
    for config in per_run[first][0]:
        ours = [m[config][0] for m in per_run[first] if config in m]
        theirs = [m[config][0] for m in per_run[second] if config in m]
        if not ours or not theirs:
            continue
        ratio = statistics.median(ours) / statistics.median(theirs)
        if statistics.median(ours) >= 0.1:
            ratios.append(ratio)
        print(
            f"  {config:32} {statistics.median(ours):10.4f} {statistics.median(theirs):10.4f}"
            f" {ratio:6.3f}"
        )
    if ratios:
        print(
            f"  configs of 0.1 ms or more, {first}/{second} over runs: median "
            f"{statistics.median(ratios):.4f}, range {min(ratios):.4f}-{max(ratios):.4f}"
            f" ({len(ratios)} configs)"
        )


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
    over_runs(work, labels[:2], identity)


if __name__ == "__main__":
    main()
