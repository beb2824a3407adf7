"""Peak memory of `bench fetch` on large measurements.csv files (developer tool).

Builds local-store runs in a temporary state dir, runs `bench fetch` for each in a child
process of the given interpreter and source tree, and prints the child's peak RSS
(getrusage) with its exit code and wall time:

    python tools/measure_fetch_memory.py [--source DIR] [--mb 128]

--source points at another checkout (e.g. the main branch) to compare side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HEADER = (
    "run_id,config,implementation,mode,round,calls,latency_ms,sm_clock_mhz,mem_clock_mhz,"
    "temperature_c,power_w,throttle_reasons,throttled,timestamp\n"
)


STAMP = "2026-11-23T05:00:00+00:00"


def write_measurements(path: Path, run_id: str, target_bytes: int, max_rows: int | None):
    """Valid rows up to a size or a count, streamed (this process stays small); returns
    (bytes, rows, sha256)."""
    row = f"{run_id},cfg,sdpa,single,{{}},1,1.2345,1500,6000,55,70.5,0,false,{STAMP}\n"
    digest, size, count = hashlib.sha256(), 0, 0
    with open(path, "wb") as f:
        block = [HEADER]
        while size < target_bytes and (max_rows is None or count < max_rows):
            block.append(row.format(count))
            size += len(block[-1])
            count += 1
            if len(block) >= 10_000:
                data = "".join(block).encode()
                f.write(data)
                digest.update(data)
                block = []
        data = "".join(block).encode()
        f.write(data)
        digest.update(data)
    return path.stat().st_size, count, digest.hexdigest()


def write_run(state: Path, run_id: str, size: int, max_rows, claim: tuple | None) -> None:
    run = state / "store" / "bench" / "runs" / run_id
    (run / "results").mkdir(parents=True)
    actual, rows, sha = write_measurements(
        run / "results" / "measurements.csv", run_id, size, max_rows
    )
    claimed_bytes, claimed_rows = claim or (actual, rows)
    now = datetime.now(timezone.utc)
    manifest = {
        "schema_version": "1",
        "run_id": run_id,
        "status": "partial",
        "reason": "measured for memory",
        "finished_at": now.isoformat(),
        "files": [
            {
                "path": "results/measurements.csv",
                "sha256": sha,
                "bytes": claimed_bytes,
                "rows": claimed_rows,
            }
        ],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    record = {
        "run_id": run_id,
        "backend": "local",
        "plan": "memory",
        "budget_usd": 1.0,
        "rate_usd_per_hour": 0.0,
        "max_run_seconds": 3600,
        "estimated_seconds": 60,
        "created_at": (now - timedelta(minutes=5)).isoformat(),
        "state": "running",
    }
    import sqlite3

    with sqlite3.connect(state / "runs.sqlite") as db:
        db.execute("CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, record TEXT)")
        db.execute("INSERT INTO runs VALUES (?, ?)", (run_id, json.dumps(record)))


def fetch_peak(source: Path, state: Path, run_id: str) -> tuple[int, float, float, str]:
    """Exit code, peak RSS in MiB and seconds of `bench fetch RUN_ID` in a fresh child."""
    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        f"sys.exit(main(['fetch', {run_id!r}, '--dest', {str(state / 'results')!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(source), "BENCH_STATE_DIR": str(state)}
    started = time.monotonic()
    # GNU time forks the interpreter from a small process: a child's peak RSS counts what
    # its parent held at the fork, so this script's own memory must not be that parent.
    result = subprocess.run(
        ["/usr/bin/time", "-f", "TIME-PEAK %M", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=state,
    )
    seconds = time.monotonic() - started
    lines = result.stderr.strip().splitlines()
    peak = next(int(line.split()[1]) for line in lines if line.startswith("TIME-PEAK"))
    errors = [line for line in lines if not line.startswith(("TIME-PEAK", "Command exited"))]
    last = (errors or [""])[-1][:110]
    return result.returncode, peak / 1024, seconds, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--mb", type=int, default=128)
    args = parser.parse_args()
    cases = [
        ("default plan (1,800 rows)", 10**9, 1_800, None),
        (f"{args.mb} MB, honest manifest", args.mb << 20, None, None),
        (f"{args.mb} MB, manifest claims 1 MB", args.mb << 20, None, (1 << 20, 5_000)),
        ("250,000 rows (the row limit)", 10**9, 250_000, None),
    ]
    print(f"source: {args.source}")
    print(f"{'case':38} {'exit':>4} {'peak MiB':>9} {'seconds':>8}  last line")
    for index, (name, size, max_rows, claimed) in enumerate(cases):
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp)
            run_id = f"20261123-000000-{index:06x}"
            write_run(state, run_id, size, max_rows, claimed)
            code, peak, seconds, last = fetch_peak(args.source, state, run_id)
            print(f"{name:38} {code:>4} {peak:>9.0f} {seconds:>8.1f}  {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
