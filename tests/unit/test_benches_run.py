"""The harness end to end on the CPU, with real torch, as the startup script runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

from benches.cli import main as benches_main
from benches.plan import resolve_plan
from benches.writers import columns, read_csv
from results_schema import CSV_MODELS, CorrectnessRow, Manifest, Measurement, Status, SummaryRow
from results_schema.record import PROFILE_FILES, RESULT_FILES
from tests.limits import HANG_SECONDS

REPO = Path(__file__).resolve().parents[2]


def benches_here(*args: str) -> int:
    """The harness's own entry (`python -m benches` is sys.exit(main())) run in this process,
    whose torch is imported already: a fresh interpreter's import is ~2 s of CPU."""
    return benches_main(list(args))


@pytest.fixture
def smoke_run(cpu_smoke_run) -> Path:
    """The session's cpu-smoke run (tests/conftest.py): correctness, then run."""
    return cpu_smoke_run


@pytest.mark.slow
def test_every_csv_row_validates_with_model_columns(smoke_run):
    for name, model in CSV_MODELS.items():
        if name in PROFILE_FILES:  # written only when the plan asks for a profile
            continue
        path = smoke_run / "results" / name
        assert path.read_text().splitlines()[0].split(",") == columns(model)
        assert read_csv(path, model), name


def test_samples_per_implementation_match_the_plan(smoke_run):
    plan = resolve_plan("cpu-smoke")
    rows = read_csv(smoke_run / "results" / "measurements.csv", Measurement)
    for impl in plan.identities:
        assert sum(r.implementation == impl for r in rows) == plan.samples_per_implementation()
    rounds = {(r.config, r.implementation): set() for r in rows}
    placements = {(r.config, r.implementation): set() for r in rows}
    for r in rows:
        rounds[(r.config, r.implementation)].add(r.round)
        placements[(r.config, r.implementation)].add(r.placement)
    assert all(v == set(range(plan.samples_per_config)) for v in rounds.values())
    assert all(v == set(range(plan.placements)) for v in placements.values())


def test_within_a_config_each_identity_follows_another_as_often_as_that_one_follows_it(
    smoke_run,
):
    """The sample before moves a sample (on a loaded CPU, SDPA right after its A/A twin read
    16 % fast): the rounds' order balances it (benches/round_order.py). Before, rounds drawn
    independently from the plan's seed had one config's twin follow SDPA 38 times and SDPA
    follow the twin 18, the same in every run: the control read 1.10 there every time."""
    rows = read_csv(smoke_run / "results" / "measurements.csv", Measurement)
    follows: Counter = Counter()
    for before, row in zip(rows, rows[1:], strict=False):  # written in the order timed
        if before.config == row.config:
            follows[(row.config, before.implementation, row.implementation)] += 1
    identities = resolve_plan("cpu-smoke").identities
    for config in {r.config for r in rows}:
        for a, b in combinations(identities, 2):
            # A partial cycle of the design at the end: at most one cycle's difference.
            assert abs(follows[(config, a, b)] - follows[(config, b, a)]) <= 2, (config, a, b)


def test_timed_outputs_were_checked_first_and_last(smoke_run):
    plan = resolve_plan("cpu-smoke")
    checks = read_csv(smoke_run / "results" / "timed_checks.csv", CorrectnessRow)
    assert sorted((r.config, r.implementation, r.stage) for r in checks) == sorted(
        (c.name, i, stage)
        for c in plan.configs
        for i in plan.identities
        for stage in ("timed-first", "timed-last")
    )
    assert all(r.passed and r.rel_l2_error <= r.tolerance for r in checks)


def test_summary_has_one_row_per_config_and_implementation(smoke_run):
    plan = resolve_plan("cpu-smoke")
    summary = read_csv(smoke_run / "results" / "summary.csv", SummaryRow)
    assert len(summary) == len(plan.configs) * len(plan.identities)
    for row in summary:
        assert row.run_id == smoke_run.name and row.n == plan.samples_per_config
        assert row.placements == plan.placements
        baseline = row.implementation != plan.candidate
        assert (row.speedup is not None) == baseline
        if baseline:
            assert row.speedup_ci_low <= row.speedup <= row.speedup_ci_high
            twin = plan.control if row.implementation == plan.control_identity else plan.candidate
            assert row.versus == twin
    gate = read_csv(smoke_run / "results" / "correctness.csv", CorrectnessRow)
    assert all(r.passed for r in gate)


def test_manifest_and_status_claim_completion(smoke_run):
    manifest = Manifest.model_validate_json((smoke_run / "manifest.json").read_text())
    assert manifest.status == "complete" and manifest.run_id == smoke_run.name
    assert manifest.plan.name == "cpu-smoke" and manifest.environment.python
    assert manifest.statistics.method == "placement-cluster-bootstrap"
    assert manifest.statistics.placements == 4 and manifest.statistics.control == "sdpa@aa"
    assert {f.path for f in manifest.files} == {f"results/{n}" for n in RESULT_FILES}
    status = Status.model_validate_json((smoke_run / "status.json").read_text())
    assert (status.phase, status.state, status.done) == ("benchmark", "complete", status.total)


@pytest.mark.slow
def test_measurements_flag_scales_the_total_and_each_run_draws_its_own_order(tmp_path, smoke_run):
    """Two runs of one plan: their placements and rounds' order are each run's own (the
    plan's seed and the run's secret: benches/runner.py `layout_seed`). Drawn from the
    plan's seed alone, every run repeated one layout's bias (2026-11-29: a placement read
    SDPA 1.6x its A/A twin in 12 runs of 12)."""
    out = str(tmp_path)
    assert benches_here("run", "--plan", "cpu-smoke", "--out", out, "--measurements", "13") == 0
    rows = read_csv(tmp_path / "results" / "measurements.csv", Measurement)
    assert sum(r.implementation == "sdpa" for r in rows) == 13

    def first_rounds(rows) -> dict[str, list[str]]:  # each config's first two rounds
        order: dict[str, list[str]] = {}
        for row in rows:
            if row.round < 2:
                order.setdefault(row.config, []).append(row.implementation)
        return order

    other = read_csv(smoke_run / "results" / "measurements.csv", Measurement)
    assert first_rounds(rows) != first_rounds(other)


def test_environment_fingerprint_reads_bench_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ZONE", "us-central1-a")
    monkeypatch.setenv("BENCH_SPOT", "true")
    assert benches_here("environment", "--out", str(tmp_path / "env.json")) == 0
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["zone"] == "us-central1-a" and data["spot"] is True and data["torch"]


@pytest.mark.slow
def test_each_rows_repro_command_checks_that_row_again_with_the_same_inputs(smoke_run, tmp_path):
    """A row's repro, run in a directory holding the run's plan.json (the payload's root
    does), checks that config and identity alone, on the run's own inputs: the same
    errors to the last digit."""
    (tmp_path / "plan.json").write_text((smoke_run / "plan.json").read_text())
    rows = read_csv(smoke_run / "results" / "correctness.csv", CorrectnessRow)
    row = rows[-1]
    words = row.repro.split()
    assert words[:4] == ["python", "-m", "benches", "correctness"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    again = subprocess.run(
        [sys.executable, *words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_SECONDS,
    )
    assert again.returncode == 0, again.stderr
    (checked,) = read_csv(tmp_path / "repro" / "results" / "correctness.csv", CorrectnessRow)
    assert (checked.config, checked.implementation) == (row.config, row.implementation)
    assert (checked.max_abs_error, checked.rel_l2_error) == (row.max_abs_error, row.rel_l2_error)

    summary = read_csv(smoke_run / "results" / "summary.csv", SummaryRow)
    compared = next(r for r in summary if r.versus)
    assert f"--implementation {compared.implementation}" in compared.repro
    assert f"--implementation {compared.versus}" in compared.repro


def test_a_repro_naming_what_the_plan_lacks_is_refused(tmp_path, capsys):
    out = str(tmp_path)
    assert benches_here("correctness", "--plan", "cpu-smoke", "--out", out, "--config", "x") == 2
    assert "not in plan 'cpu-smoke': x" in capsys.readouterr().err
