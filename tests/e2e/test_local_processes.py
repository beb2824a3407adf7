"""Local runs against the real startup script, with a stand-in payload interpreter.

The stand-in (a shell script given as `payload_python`) answers the environment check,
and then does what a test needs in the benchmark phase: hang, or fill the disk. That
keeps these runs to seconds while the script, its traps and the controller are real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.backends.local import RUN_MARK_ENV
from orchestrator.cli import main
from results_schema import Manifest, Measurement
from tests.e2e.test_local_run import store_run_dir
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(120)

FORBIDDEN = ["\x1b", "\x07", "\x7f", *(chr(c) for c in range(0x80, 0xA0))]
MEASUREMENT_HEADER = ",".join(Measurement.model_fields)
# A row after its run id, as the shell writes it ($i its round): every other field empty.
_ROW = {"config": "fp32-b1h2s17d64", "implementation": "sdpa", "mode": "single", "round": "$i"}
_ROW |= {"placement": "0", "calls": "1", "latency_ms": "1.5", "throttled": "false"}
_ROW |= {"timestamp": "2026-11-23T05:00:00+00:00"}
MEASUREMENT_ROW = ",".join(_ROW.get(name, "") for name in list(Measurement.model_fields)[1:])

# The benchmark phase's behaviour is the body of `benchmark()`.
STAND_IN = """#!/usr/bin/env bash
benchmark() {{
{benchmark}
}}
case "$1" in
  -) cat >/dev/null; exit 0 ;;                       # the pinned-packages check
  --version) echo "Python 3.12 (stand-in)" ;;
  -m) shift
      case "$1" in
        benches) shift
          case "$1" in
            environment) echo '{{}}' > "$3" ;;
            correctness) ;;
            run) shift; benchmark "$@" ;;
          esac ;;
      esac ;;
esac
"""


def stand_in(directory: Path, benchmark: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python"
    path.write_text(STAND_IN.format(benchmark=benchmark))
    path.chmod(0o755)
    return path


def only_run_id(state: Path) -> str:
    # (.harness: the folder every run's harness runs from, partials/common.sh.j2)
    (run_id,) = [p.name for p in (state / "sandboxes").iterdir() if not p.name.startswith(".")]
    return run_id


def run_processes(run_id: str) -> list[int]:
    """Every live process carrying the run's mark, whatever its session or group."""
    mark = f"{RUN_MARK_ENV}={run_id}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0"):
                state = (environ.parent / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
                if state != b"Z":
                    found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def wait_for(predicate, timeout: float = HANG_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def launch_local(*extra: str) -> int:
    return main(["launch", "--backend", "local", "--plan", "cpu-smoke", "--budget", "1", *extra])


def test_stop_all_ends_every_process_of_a_run_whose_bash_was_killed(bench_env, monkeypatch):
    marker = bench_env / "benchmark-started"
    python = stand_in(bench_env / "py", f"touch {marker}; sleep 300 & sleep 300; wait")
    monkeypatch.setenv("BENCH_PAYLOAD_PYTHON", str(python))
    assert launch_local() == 0
    wait_for(marker.exists)
    run_id = only_run_id(bench_env / "state")
    pid = int((bench_env / "state" / "sandboxes" / run_id / "startup.pid").read_text())
    before = run_processes(run_id)
    assert pid in before and len(before) >= 4  # bash, heartbeat, watchdog, timeout, sleeps
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: pid not in run_processes(run_id))
    assert run_processes(run_id), "its children outlive the bash: what stop-all must end"
    try:
        assert main(["stop-all", "--yes"]) == 0
        wait_for(lambda: not run_processes(run_id))
    finally:
        for left in run_processes(run_id):
            os.kill(left, signal.SIGKILL)


@pytest.mark.parametrize("handle", ["0", "-1", "1", "not-a-pid"])
def test_a_handle_that_would_signal_others_is_never_used(bench_env, handle, capsys):
    from orchestrator.config import load_config
    from orchestrator.registry import RunRecord
    from orchestrator.service.context import Context

    ctx = Context(load_config())
    ctx.registry.add(
        RunRecord(
            run_id="20261123-000000-abcdef",
            backend="local",
            plan="p",
            budget_usd=1,
            rate_usd_per_hour=0,
            max_run_seconds=60,
            estimated_seconds=60,
            created_at="2026-11-23T00:00:00+00:00",
            handle=handle,
            state="running",
        )
    )
    assert main(["stop-all", "--yes"]) == 0
    assert "no bench machines are running" in capsys.readouterr().out
    assert main(["status"]) == 0


def test_launch_wait_status_logs_fetch_show_a_hostile_run_as_text(bench_env, capsys):
    """The run's output (in its failure reason, heartbeat and log) holds escapes and markup;
    no command may print a control byte or exit 1. (An interpreter path holding them is
    refused as a setting before anything runs: tests/unit/test_input_validation.py.)"""
    hostile = "printf 'missing: \\033]52;c;ZXZpbA==\\007 [/] \\033[2J\\n' >&2\nexit 1"
    python = stand_in(bench_env / "py", hostile)
    os.environ["BENCH_PAYLOAD_PYTHON"] = str(python)
    try:
        capsys.readouterr()
        code = launch_local("--wait")
        out = "".join(capsys.readouterr())
    finally:
        del os.environ["BENCH_PAYLOAD_PYTHON"]
    assert code == 5, out
    assert not any(ch in out for ch in FORBIDDEN), repr(out)
    run_id = only_run_id(bench_env / "state")
    shown = {}
    for command in (["status"], ["logs", run_id], ["fetch", run_id]):
        code = main(command)
        shown[command[0]] = out = "".join(capsys.readouterr())
        assert code in (0, 5), (command, out)
        assert not any(ch in out for ch in FORBIDDEN), (command, repr(out))
    assert "\\x1b]52" in shown["logs"], shown["logs"]  # the hostile text was shown, escaped


@pytest.fixture
def small_disk(bench_env):
    """The sandboxes on a real filesystem of their own, small enough to fill."""
    mount = bench_env / "state" / "sandboxes"
    mount.mkdir(parents=True)
    # preflight wants 200 MB free for a CPU plan.
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=220m", "tmpfs", str(mount)], capture_output=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_full_mid_benchmark_leaves_a_valid_partial_manifest(
    small_disk, bench_env, monkeypatch, capsys
):
    rows = 40
    benchmark = f"""
  local out=$4 run=$6 i
  mkdir -p "$out/results"
  echo '{MEASUREMENT_HEADER}' > "$out/results/measurements.csv"
  for ((i = 0; i < {rows}; i++)); do
    echo "$run,{MEASUREMENT_ROW}"
  done >> "$out/results/measurements.csv"
  cat /dev/zero > "$out/fill" 2>/dev/null     # the disk fills up...
  for ((; i < 100000; i++)); do               # ...while the benchmark still writes
    echo "$run,{MEASUREMENT_ROW}" \\
      >> "$out/results/measurements.csv" 2>/dev/null || exit 1
  done"""
    monkeypatch.setenv("BENCH_PAYLOAD_PYTHON", str(stand_in(bench_env / "py", benchmark)))
    assert launch_local("--wait") == 5
    run_id = only_run_id(bench_env / "state")
    stored = store_run_dir(bench_env / "state", run_id) / "manifest.json"
    manifest = Manifest.model_validate(json.loads(stored.read_bytes()))
    assert manifest.status == "partial", manifest.reason
    measured = manifest.file("results/measurements.csv")
    assert measured is not None and measured.rows >= rows
    capsys.readouterr()
    # Partial is exit 5, but what was measured is fetched and verified.
    assert main(["fetch", run_id, "--dest", str(bench_env / "results")]) == 5
    fetched = bench_env / "results" / run_id / "results" / "measurements.csv"
    assert len(fetched.read_text().splitlines()) == measured.rows + 1


@pytest.mark.parametrize(
    ("gate_ended", "failed"), [(False, "correctness"), (True, "benchmark")], ids=["gate", "timing"]
)
def test_the_gate_and_the_timing_share_a_process_and_keep_their_phases(
    bench_env, monkeypatch, gate_ended, failed
):
    """Issue 31 item 4: one harness process runs both phases and writes their phases.tsv
    lines; a failure is its phase's: before the gate's line, correctness; after, benchmark."""
    gate = 'printf "correctness\\t3\\t0\\n" >> "$phases"' if gate_ended else ":"
    benchmark = f"""
  local phases=""
  while (( $# )); do [[ $1 == --phases-file ]] && phases=$2; shift; done
  [[ -n $phases ]] || exit 9
  {gate}
  exit 1"""
    monkeypatch.setenv("BENCH_PAYLOAD_PYTHON", str(stand_in(bench_env / "py", benchmark)))
    assert launch_local("--wait") != 0
    run_id = only_run_id(bench_env / "state")
    stored = store_run_dir(bench_env / "state", run_id) / "manifest.json"
    manifest = Manifest.model_validate(json.loads(stored.read_bytes()))
    assert manifest.failed_phase == failed, manifest.reason
    assert manifest.reason.startswith(f"phase {failed} failed with exit code 1")
    measured = [
        (p.name, p.exit_code) for p in manifest.phases if p.name in ("correctness", "benchmark")
    ]
    assert measured == (
        [("correctness", 0), ("benchmark", 1)] if gate_ended else [("correctness", 1)]
    )
