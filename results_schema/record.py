"""Writes status.json and manifest.json with the standard library alone.

The startup script carries this file inside itself and runs it with the machine's
python3, so a run whose environment phase failed (no pip, no pydantic, no torch) still
ends with a valid heartbeat and a `failed` manifest. The shapes here must match
`results_schema.models`; tests validate what this writes against those models.

    python3 record.py status   --dir D --run-id ID --phase P --state S [--message M]
                               [--done N --total N]
    python3 record.py manifest --dir D --run-id ID --exit-code RC [--reason R] [--failed-phase P]
                               [--started-at ISO] [--interrupted] [--cost-json JSON]
    python3 record.py tree     --dir D --run-id ID --tree NAME --stage STAGE [--expect SHA256]
                               [--trees FOLDER...]

`tree` checks one tree of the payload (the harness, or a kernel tree's folder) against the
digest it must have just before it is used, and records the check in trees.json (the
manifest's `trees`): the same digest the controller computed at launch (`tree_digest`).
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import hashlib
import json
import os
import re
import stat
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
# The harness's packages in the payload (kernel trees travel as folders of their own).
PAYLOAD_PACKAGES = ("benches", "results_schema")
# The harness as a tree whose digest is checked before it runs: its packages and the plan.
HARNESS_TREE = "harness"
HARNESS_PARTS = (*PAYLOAD_PACKAGES, "plan.json")
# Where a check stands: a kernel tree just before its build (against the launch's digest),
# after its build (what the measure phase then holds it to), and every tree just before the
# measure phase imports it.
TREE_STAGES = ("build", "built", "measure")
# A leftovers.json sweep names at most this many processes (it counts them all: a fork
# bomb's thousands would make the manifest as large as they like), each command line cut.
MAX_NAMED_LEFTOVERS = 32
MAX_COMMAND_CHARS = 200
MAX_LEFTOVER_SWEEPS = 64
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
    "ranking": "ranking.json",
    "sampling": "sampling.json",
    "trees": "trees.json",
    "containment": "containment.json",
    "leftovers": "leftovers.json",
}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat()


def write_json_atomic(path: str, data) -> None:
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


def tree_digest(entries) -> str:
    """A tree's digest from its (name, sha256 of contents) pairs: sha256 over the sorted
    '<name>\\0<sha256>\\n' lines. The controller computes it from the files it packs, the
    target from the files on its disk, fetch from the payload's tarball."""
    digest = hashlib.sha256()
    for name, sha in sorted(entries):
        digest.update(f"{name}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def payload_tree_digests(members) -> dict:
    """Each tree's digest from the payload's (name, sha256) members: the harness (its
    packages and plan.json, named from the payload's root) and each kernel tree's folder
    (named from the folder)."""
    trees: dict = {}
    for name, sha in members:
        top, _, rest = name.partition("/")
        if top in HARNESS_PARTS:
            trees.setdefault(HARNESS_TREE, []).append((name, sha))
        elif rest:
            trees.setdefault(top, []).append((rest, sha))
    return {tree: tree_digest(entries) for tree, entries in trees.items()}


def _entry_sha(path: str) -> str:
    """A file's sha256; a link is its target and anything else its kind, never opened (a
    FIFO would block the check)."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return "link:" + os.readlink(path)
    if stat.S_ISREG(mode):
        return sha256_of(path)
    return f"special:{stat.S_IFMT(mode):o}"


def disk_entries(root: str, parts=None) -> list:
    """(name relative to `root`, sha) of every file, link or special file under `root` (or
    only under its entries `parts`), never following a link."""
    found = []
    for top in [os.path.join(root, part) for part in parts] if parts else [root]:
        if os.path.islink(top) or not os.path.isdir(top):
            if os.path.lexists(top):
                found.append((os.path.relpath(top, root), _entry_sha(top)))
            continue
        for folder, dirs, files in os.walk(top):
            linked = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
            dirs[:] = [d for d in dirs if d not in linked]
            for name in files + linked:
                path = os.path.join(folder, name)
                found.append((os.path.relpath(path, root).replace(os.sep, "/"), _entry_sha(path)))
    return found


def disk_tree_digest(payload_root: str, tree: str) -> str:
    """The digest of a tree of the payload as it lies on this disk."""
    if tree == HARNESS_TREE:
        return tree_digest(disk_entries(payload_root, HARNESS_PARTS))
    return tree_digest(disk_entries(os.path.join(payload_root, tree)))


def strangers_in_payload(payload_root: str, folders) -> list:
    """Entries of the payload's root that neither launch nor the script put there: the
    harness runs with that root first on its import path, so a module planted there (a
    sitecustomize.py, say) would run inside it. The script's own are each kernel tree's
    folder and the files beside it named after it (<folder>.build.log, ...)."""
    known = set(HARNESS_PARTS) | set(folders) | {"peer-installs"}
    return sorted(
        name
        for name in os.listdir(payload_root)
        if name not in known and not any(name.startswith(f + ".") for f in folders)
    )


def check_tree(args: argparse.Namespace) -> str:
    """Checks (or, at stage `built`, takes) the tree's digest and appends the record to
    trees.json; returns the one-line reason a check failed, or ''."""
    payload_root = os.path.join(args.dir, "payload")
    found = disk_tree_digest(payload_root, args.tree)
    # Trees build at once (user_build.sh.j2): each check reads, appends to and rewrites
    # trees.json under a lock of its own, so no tree's record is lost to another's.
    with open(os.path.join(args.dir, "trees.json.lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = read_side_file(args.dir, "trees.json") or []
        return _record_tree_check(args, records, found, payload_root)


def _record_tree_check(args: argparse.Namespace, records: list, found: str, payload_root: str):
    expected = args.expect or None
    if args.stage == "measure" and args.tree != HARNESS_TREE:
        built = [r for r in records if r["tree"] == args.tree and r["stage"] == "built"]
        expected = built[-1]["found_sha256"] if built else None
    problem = "" if args.stage == "built" else _tree_problem(args, expected, found, payload_root)
    record = {"tree": args.tree, "stage": args.stage, "found_sha256": found}
    record.update(expected_sha256=expected, problem=problem or None)
    write_json_atomic(os.path.join(args.dir, "trees.json"), [*records, record])
    return problem


def _tree_problem(args: argparse.Namespace, expected, found: str, payload_root: str) -> str:
    when = "before its build" if args.stage == "build" else "before the measure phase"
    if expected is None:
        return f"{args.tree}: no digest to check it against {when}: refusing to use it"
    if found != expected:
        since = "launch" if args.stage == "build" or args.tree == HARNESS_TREE else "its build"
        return (
            f"{args.tree} changed since {since}: its files' sha256 is {found[:12]}…, "
            f"expected {expected[:12]}… {when}"
        )
    if args.tree == HARNESS_TREE:
        strangers = strangers_in_payload(payload_root, args.trees)
        if strangers:
            return f"the payload holds {', '.join(strangers[:5])}, which launch did not put there"
    return ""


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
    manifest["leftovers"] = bounded_leftovers(manifest["leftovers"])
    if args.cost_json:
        cost = json.loads(args.cost_json)
        cost["started_at"] = manifest["started_at"]
        cost["finished_at"] = manifest["finished_at"]
        cost["estimated_usd"] = estimated_cost(cost)
        manifest["cost"] = cost
    return manifest


def bounded_leftovers(sweeps):
    """leftovers.json as the manifest carries it: the first sweeps, each naming its first
    processes (its count stays whole), each command line cut. What is not of that shape is
    left for the controller's boundary to refuse; this only must not fail on it."""
    if not isinstance(sweeps, list):
        return None
    bounded = []
    for sweep in sweeps[:MAX_LEFTOVER_SWEEPS]:
        named = sweep.get("processes") if isinstance(sweep, dict) else None
        if not isinstance(named, list):
            bounded.append(sweep)
            continue
        processes = [
            {**p, "command": str(p.get("command"))[:MAX_COMMAND_CHARS]}
            if isinstance(p, dict)
            else p
            for p in named[:MAX_NAMED_LEFTOVERS]
        ]
        bounded.append({**sweep, "processes": processes})
    return bounded


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
    tree = sub.add_parser("tree")
    tree.add_argument("--tree", required=True, help=f"{HARNESS_TREE} or a kernel tree's folder")
    tree.add_argument("--stage", required=True, choices=TREE_STAGES)
    tree.add_argument("--expect", default="", help="the digest it must have (launch's)")
    tree.add_argument("--trees", nargs="*", default=[], help="every kernel tree's folder")
    for p in (status, manifest, tree):
        p.add_argument("--dir", required=True)
        p.add_argument("--run-id", required=True)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "status":
        path = os.path.join(args.dir, "status.json")
        write_status(path, args.run_id, args.phase, args.state, args.done, args.total, args.message)
    elif args.command == "tree":
        problem = check_tree(args)
        if problem:
            print(problem, file=sys.stderr)
            return 1
    else:
        manifest = build_manifest(args)
        write_manifest(args.dir, manifest)
        print(manifest["status"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
