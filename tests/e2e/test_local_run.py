"""The local backend end to end: the real startup script, the real payload, real torch."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from results_schema import PHASES, Manifest, Measurement, Plan, SummaryRow
from results_schema.csvio import read_rows
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(300)


def store_run_dir(state: Path, run_id: str) -> Path:
    """The run's folder in the local store: its key carries the run's secret."""
    return state / "store" / "bench" / RunRegistry(state / "runs.sqlite").get(run_id).run_key


def only_run_id(state: Path) -> str:
    (record,) = RunRegistry(state / "runs.sqlite").all()
    return record.run_id


def small_plan(tmp_path: Path, name: str = "tiny", samples: int = 6, heavy: bool = False) -> Path:
    """cpu-smoke cut to two configs: its smallest, or (heavy) its largest."""
    plan = Plan.model_validate_json(_cpu_smoke_text())
    configs = plan.configs[-2:] if heavy else plan.configs[:2]
    plan = plan.model_copy(update={"name": name, "samples_per_config": samples, "configs": configs})
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json(indent=2))
    return path


def _cpu_smoke_text() -> str:
    from orchestrator.service.plans import plans_dir

    return (plans_dir() / "cpu-smoke.json").read_text()


def leftover_processes(sandbox: Path) -> list[str]:
    """Processes whose command line mentions the run's sandbox (the watchdog's sleep, ...)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(sandbox) in text:
            found.append(text)
    return found


def wait_for(predicate, timeout: float = HANG_SECONDS, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def test_cpu_smoke_run_fetch_and_verify(bench_env, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what rich assumes for a pipe, and CI's width
    state = bench_env / "state"
    assert (
        main(["launch", "--backend", "local", "--plan", "cpu-smoke", "--budget", "1.00", "--wait"])
        == 0
    )
    run_id = only_run_id(state)
    # --wait returns at the manifest; the script's exit trap may still be ending (a loaded
    # machine): every process of the run is gone soon after, none stays.
    wait_for(lambda: not leftover_processes(state / "sandboxes" / run_id))
    capsys.readouterr()
    assert main(["fetch", "--dest", str(bench_env / "results")]) == 0
    out = capsys.readouterr().out
    assert "every sha256 verified" in out and "speedup" in out
    assert_summary_readable_at_80_columns(out, Plan.model_validate_json(_cpu_smoke_text()))
    # A plain run's backend stands alone in `status`; only a sweep member's names its GPU
    # (its history is filed under the GPU either way: service/launch.target_gpu).
    # The table's row; a run whose A/A control judged the machine noisy (a busy machine's,
    # issue 31) has a note line "<run id>: noisy: ..." under the table too.
    assert main(["status"]) == 0
    (row,) = [f for f in map(str.split, capsys.readouterr().out.splitlines()) if f[:1] == [run_id]]
    assert row[1] == "local"

    fetched = bench_env / "results" / run_id
    manifest = Manifest.model_validate_json((fetched / "manifest.json").read_text())
    assert manifest.status == "complete" and manifest.plan is not None
    for entry in manifest.files:
        data = (fetched / entry.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256
    with open(fetched / "results" / "measurements.csv", newline="") as f:
        per_impl = Counter(row["implementation"] for row in csv.DictReader(f))
    expected = manifest.plan.samples_per_implementation()
    assert per_impl == {name: expected for name in manifest.plan.identities}
    assert [p.name for p in manifest.phases] == list(PHASES)
    assert manifest.environment and manifest.environment.torch
    assert manifest.environment.model_extra["environment_source"] == "given"
    # The fetched phase times refine the next launch's estimate of the same plan.
    from orchestrator.registry import RunRegistry
    from orchestrator.runtime_model import MODEL_PHASES, history_key

    key = history_key(manifest.plan)
    registry = RunRegistry(state / "runs.sqlite")
    (recorded,) = registry.past_phase_seconds(key, "local", registry.get(run_id).gpu)
    assert set(recorded) == set(MODEL_PHASES) - {"shutdown"}  # no manifest sees the shutdown
    assert recorded["benchmark"] == next(
        p.seconds for p in manifest.phases if p.name == "benchmark"
    )

    capsys.readouterr()
    assert main(["logs", run_id]) == 0
    log = capsys.readouterr().out
    assert "phase measure: done" in log and f"run {run_id} finished: complete" in log

    # Idempotent: fetching again gives the same verified copy.
    assert main(["fetch", run_id, "--dest", str(bench_env / "results")]) == 0

    # A corrupt CSV in the store: exit 5, and the good copy stays as it was.
    good = (fetched / "results" / "measurements.csv").read_bytes()
    stored = store_run_dir(state, run_id) / "results" / "measurements.csv"
    stored.write_bytes(_misspell_first_mode(stored.read_bytes()))
    capsys.readouterr()
    assert main(["fetch", run_id, "--dest", str(bench_env / "results")]) == 5
    err = capsys.readouterr().err
    # One message, wrapped at its spaces to the 80 columns stated above (hanging lines).
    assert "sha256" in err and "measurements.csv" in err
    assert len([line for line in err.strip().splitlines() if not line.startswith("  ")]) == 1
    assert (fetched / "results" / "measurements.csv").read_bytes() == good

    # A row that breaks the schema, with a manifest that matches its bytes: still exit 5.
    stored.write_bytes(_misspell_first_mode(good))
    manifest_path = store_run_dir(state, run_id) / "manifest.json"
    raw = json.loads(manifest_path.read_text())
    for entry in raw["files"]:
        if entry["path"] == "results/measurements.csv":
            entry["sha256"] = hashlib.sha256(stored.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(raw))
    assert main(["fetch", run_id, "--dest", str(bench_env / "results")]) == 5
    assert "measurements.csv line 2: mode" in capsys.readouterr().err
    assert (fetched / "results" / "measurements.csv").read_bytes() == good


def assert_summary_readable_at_80_columns(out: str, plan: Plan) -> None:
    """Every config name whole, every baseline's speedup on the line of its median."""
    table = out.splitlines()
    # A path longer than the terminal stands alone on its line, whole (cli/wrap.py).
    assert [line for line in table if len(line) > 80 and " " in line.strip()] == []
    assert "…" not in out
    for config in plan.configs:
        assert any(line.startswith(config.name + " ") for line in table), config.name
    # A row has its speedup on its median's line, or (a busy machine's timing: quantised,
    # bimodal) its flag there instead.
    judged = r"\d\.\d{4}\s+(\d+\.\d\dx \[|quantised|bimodal)"
    speedups = [line for line in table if re.search(judged, line)]
    assert len(speedups) == len(plan.configs) * (len(plan.identities) - 1)
    assert "None" not in out
    # Whose a verdict is: the candidate's over the row (issue 52), never a bare word that
    # reads as the row's.
    assert re.findall(r"\] (faster|slower|not-slower)\b", out) == []


def test_sigterm_mid_benchmark_leaves_a_partial_manifest(bench_env, tmp_path, capsys):
    plan = small_plan(tmp_path, samples=3000, heavy=True)
    state = bench_env / "state"
    assert main(["launch", "--backend", "local", "--plan", str(plan), "--budget", "1"]) == 0
    run_id = only_run_id(state)
    status_file = state / "sandboxes" / run_id / "status.json"  # live, not the 2 s-old copy

    def measuring():
        if not status_file.exists():
            return False
        status = json.loads(status_file.read_text())
        return status["phase"] == "benchmark" and status["done"] > 0

    wait_for(measuring)
    capsys.readouterr()
    assert main(["stop-all", "--yes"]) == 0
    assert "stopped 1 machines" in capsys.readouterr().out
    manifest_file = store_run_dir(state, run_id) / "manifest.json"
    wait_for(manifest_file.exists)
    manifest = Manifest.model_validate_json(manifest_file.read_text())
    assert manifest.status == "partial"
    assert "SIGTERM" in manifest.reason and "benchmark" in manifest.reason
    measured = manifest.file("results/measurements.csv")
    total = 2 * 3000 * len(manifest.plan.identities)
    assert measured is not None and 0 < measured.rows < total

    assert main(["status", run_id]) == 0
    out = capsys.readouterr().out
    assert "partial" in out and f"{measured.rows}/{total}" in out
    assert main(["fetch", run_id, "--dest", str(bench_env / "results")]) == 5
    # What was measured before the signal is flushed, and summarised.
    fetched = bench_env / "results" / run_id / "results"
    assert 0 < len(read_rows(fetched / "measurements.csv", Measurement)) < total
    assert read_rows(fetched / "summary.csv", SummaryRow)


HOSTILE = ["$(touch {canary})", "'; touch {canary} #", "`touch {canary}`"]


def test_hostile_settings_are_inert_when_the_script_runs(bench_env, tmp_path, monkeypatch):
    # One run carries every hostile string at once (each an own run cost ~25 s apiece): the
    # `'` one comes last, so an unbalanced quote cannot hide the others from the shell.
    canary = tmp_path / "pwned"
    text = " ".join(sorted((h.format(canary=canary) for h in HOSTILE), key=lambda h: "'" in h))
    state = tmp_path / f"state {text}"
    monkeypatch.setenv("BENCH_STATE_DIR", str(state))
    plan = small_plan(tmp_path, name=text, samples=2)
    code = main(["launch", "--backend", "local", "--plan", str(plan), "--budget", "1", "--wait"])
    assert not canary.exists(), "a setting was executed by the startup script"
    # Broken quoting can also just break the script (an unbalanced ' swallows lines): the
    # run must still complete, with the hostile string intact.
    assert code == 0
    manifest = Manifest.model_validate_json(
        (store_run_dir(state, only_run_id(state)) / "manifest.json").read_text()
    )
    assert manifest.status == "complete" and manifest.plan.name == text


def _misspell_first_mode(csv_bytes: bytes) -> bytes:
    """measurements.csv with its first row's timing mode spelt backwards (as many bytes, a
    cell the schema refuses)."""
    header, first, rest = csv_bytes.split(b"\n", 2)
    cells = first.split(b",")
    mode = header.split(b",").index(b"mode")
    cells[mode] = cells[mode][::-1]
    return b"\n".join([header, b",".join(cells), rest])
