"""Writes status.json and manifest.json with the standard library alone.

The startup script carries this file inside itself and runs it with the machine's
python3, so a run whose environment phase failed (no pip, no pydantic, no torch) still
ends with a valid heartbeat and a `failed` manifest. The shapes here must match
`results_schema.models`; tests validate what this writes against those models.

    python3 record.py status   --dir D --run-id ID --phase P --state S [--message M]
                               [--done N --total N]
    python3 record.py manifest --dir D --run-id ID --exit-code RC [--reason R] [--failed-phase P]
                               [--started-at ISO] [--interrupted] [--cost-json JSON]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import sys
from datetime import datetime, timezone

SCHEMA_VERSION = "1"
# The payload comes before the environment: downloading it proves the VM's bucket access in
# seconds, before minutes of package installs.
PHASES = (
    "preflight",
    "payload",
    "environment",
    "build",
    "correctness",
    "benchmark",
    "upload",
    "finish",
)
RESULT_FILES = ("measurements.csv", "summary.csv", "correctness.csv", "timed_checks.csv")
# Written only when the plan asks for Nsight Compute profiles (`--profile`).
PROFILE_FILES = ("profile.csv",)
# Nsight Compute's own reports: binary, numbered (profile.csv names each row's), never
# parsed by the controller, only size-bounded and sha256-checked.
PROFILE_REPORT_NAME = re.compile(r"profile-[0-9]{3}\.ncu-rep")
MAX_PROFILE_REPORTS = 64
# JSON side files the payload leaves in the run directory, copied into the manifest.
SIDE_FILES = {
    "plan": "plan.json",
    "environment": "environment.json",
    "kernel_build": "build.json",
    "baseline_build": "baseline_build.json",
    "user_builds": "user_builds.json",
    "statistics": "statistics.json",
    "comparison": "comparison.json",
    "noise": "noise.json",
}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat()


def write_json_atomic(path: str, data: dict) -> None:
    """Write, flush to disk, read back, and only then rename over `path`: on a full disk the
    old file (or none) stays, never an empty or cut one."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with open(tmp, encoding="utf-8") as f:
            if f.read() != text:
                raise OSError(f"{tmp} does not hold what was written")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def csv_rows(path: str) -> int:
    with open(path, newline="", encoding="utf-8") as f:
        return max(sum(1 for _ in csv.reader(f)) - 1, 0)


def drop_cut_line(path: str) -> None:
    """A writer stopped mid-row (a full disk, a kill) leaves a last line without its newline;
    cut it so that the rows before it stay valid and fetchable."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(max(size - (1 << 16), 0))
        tail = f.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        f.truncate(size - len(tail) + cut + 1 if cut >= 0 else 0)


def profile_reports(results_dir: str) -> list[str]:
    """The .ncu-rep files a profile left, by name (at most MAX_PROFILE_REPORTS)."""
    if not os.path.isdir(results_dir):
        return []
    names = sorted(n for n in os.listdir(results_dir) if PROFILE_REPORT_NAME.fullmatch(n))
    return names[:MAX_PROFILE_REPORTS]


def file_entries(run_dir: str) -> list[dict]:
    entries = []
    results_dir = os.path.join(run_dir, "results")
    for name in RESULT_FILES + PROFILE_FILES:
        path = os.path.join(results_dir, name)
        if os.path.isfile(path):
            drop_cut_line(path)
            entries.append(
                {
                    "path": f"results/{name}",
                    "sha256": sha256_of(path),
                    "bytes": os.path.getsize(path),
                    "rows": csv_rows(path),
                }
            )
    for name in profile_reports(results_dir):
        path = os.path.join(results_dir, name)
        entries.append(
            {
                "path": f"results/{name}",
                "sha256": sha256_of(path),
                "bytes": os.path.getsize(path),
                "rows": None,
            }
        )
    return entries


def read_phases(run_dir: str) -> list[dict]:
    """phases.tsv: one `name<TAB>seconds<TAB>exit_code` line per finished phase."""
    path = os.path.join(run_dir, "phases.tsv")
    phases = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3 and parts[0] in PHASES:
                    phases.append(
                        {"name": parts[0], "seconds": float(parts[1]), "exit_code": int(parts[2])}
                    )
    return phases


def read_side_file(run_dir: str, name: str):
    path = os.path.join(run_dir, name)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError:
        return None


def run_state(exit_code: int, interrupted: bool, entries: list[dict]) -> str:
    """complete: every phase passed; partial: stopped early but kept samples; else failed."""
    if exit_code == 0 and not interrupted:
        return "complete"
    measured = next((e["rows"] for e in entries if e["path"] == "results/measurements.csv"), 0)
    return "partial" if measured else "failed"


def build_manifest(args: argparse.Namespace) -> dict:
    entries = file_entries(args.dir)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_id": args.run_id,
        "status": run_state(args.exit_code, args.interrupted, entries),
        "reason": args.reason,
        "failed_phase": args.failed_phase or None,
        "started_at": args.started_at or None,
        "finished_at": utc_now(),
        "phases": read_phases(args.dir),
        "files": entries,
    }
    for key, name in SIDE_FILES.items():
        manifest[key] = read_side_file(args.dir, name)
    if args.cost_json:
        cost = json.loads(args.cost_json)
        cost["started_at"] = manifest["started_at"]
        cost["finished_at"] = manifest["finished_at"]
        cost["estimated_usd"] = estimated_cost(cost)
        manifest["cost"] = cost
    return manifest


def billed_usd(rate_usd_per_hour: float, seconds: float) -> float:
    """What GCE bills for this many seconds: per second, with a one-minute minimum."""
    return rate_usd_per_hour * max(seconds, 60.0) / 3600.0


def estimated_cost(cost: dict) -> float:
    """Rate times elapsed time, as billed."""
    if not cost.get("started_at"):
        return 0.0
    start = datetime.fromisoformat(cost["started_at"])
    end = datetime.fromisoformat(cost["finished_at"])
    return round(billed_usd(cost["rate_usd_per_hour"], (end - start).total_seconds()), 6)


def write_status(
    path: str, run_id: str, phase: str, state: str, done: int, total: int, message: str
) -> dict:
    """The one writer of status.json (the startup script's phases and the harness)."""
    status = {
        "run_id": run_id,
        "phase": phase,
        "state": state,
        "done": done,
        "total": total,
        "updated_at": utc_now(),
        "message": message,
    }
    write_json_atomic(path, status)
    return status


def write_manifest(run_dir: str, manifest: dict) -> None:
    """The one writer of manifest.json, for the script and the harness alike (but for the
    script's fallback when python3 itself is missing)."""
    write_json_atomic(os.path.join(run_dir, "manifest.json"), manifest)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="record.py")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status")
    status.add_argument("--phase", required=True, choices=PHASES)
    status.add_argument(
        "--state", required=True, choices=("running", "complete", "partial", "failed")
    )
    status.add_argument("--message", default="")
    status.add_argument("--done", type=int, default=0)
    status.add_argument("--total", type=int, default=0)
    manifest = sub.add_parser("manifest")
    manifest.add_argument("--exit-code", type=int, required=True)
    manifest.add_argument("--reason", default="")
    manifest.add_argument("--failed-phase", default="")
    manifest.add_argument("--started-at", default="")
    manifest.add_argument("--interrupted", action="store_true")
    manifest.add_argument("--cost-json", default="")
    for p in (status, manifest):
        p.add_argument("--dir", required=True)
        p.add_argument("--run-id", required=True)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "status":
        path = os.path.join(args.dir, "status.json")
        write_status(path, args.run_id, args.phase, args.state, args.done, args.total, args.message)
    else:
        manifest = build_manifest(args)
        write_manifest(args.dir, manifest)
        print(manifest["status"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
