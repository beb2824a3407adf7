"""The GPU's clocks and power per round reach the report: measurements.csv carries what NVML
read after every timed sample (benches/telemetry.py), the report's data holds it round by
round beside the fingerprint's ceilings, and `bench report` prints its range.

A CPU run has no readings: the session's cpu-smoke run, given the readings a GPU run's
rows carry, stands in for one (the harness writing them on a GPU:
tests/gpu/test_harness.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from benches.writers import read_csv, write_csv
from orchestrator.cli import cli
from orchestrator.errors import ResultsError
from orchestrator.report import load_run, make_report
from results_schema import Measurement

SM_MAX_MHZ, POWER_LIMIT_W = 2040, 72.0
THROTTLED_ROUND = 3
SW_POWER_CAP = 0x4  # an NVML clocks-event reason that slows a running kernel


def with_readings(m: Measurement) -> Measurement:
    """What NVML might read after this sample: the clock dips on every fourth round, the
    power climbs with the round, and one round meets the power cap."""
    capped = m.round == THROTTLED_ROUND
    return m.model_copy(
        update={
            "sm_clock_mhz": 1755 if m.round % 4 == 0 or capped else SM_MAX_MHZ,
            "mem_clock_mhz": 6251,
            "power_w": 40.0 + m.round,
            "temperature_c": 50 + m.round % 10,
            "throttle_reasons": SW_POWER_CAP if capped else 0,
            "throttled": capped,
        }
    )


@pytest.fixture
def gpu_like_run(cpu_smoke_run, tmp_path) -> Path:
    run = tmp_path / cpu_smoke_run.name
    shutil.copytree(cpu_smoke_run, run, ignore=shutil.ignore_patterns("report"))
    measurements = run / "results" / "measurements.csv"
    write_csv(
        measurements, Measurement, [with_readings(m) for m in read_csv(measurements, Measurement)]
    )
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["environment"] |= {
        "sm_clock_max_mhz": SM_MAX_MHZ,
        "mem_clock_max_mhz": 6251,
        "power_limit_w": POWER_LIMIT_W,
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.mark.slow
def test_the_reports_data_holds_each_rounds_clocks_and_power(gpu_like_run):
    rows = read_csv(gpu_like_run / "results" / "measurements.csv", Measurement)
    expected = {}
    for m in rows:
        expected.setdefault((m.config, m.round), []).append(m)

    rounds = load_run(gpu_like_run).telemetry
    assert {(r.config, r.round) for r in rounds} == set(expected)
    for r in rounds:
        samples = expected[(r.config, r.round)]
        assert r.samples == len(samples)
        assert r.placement == samples[0].placement
        clocks = [m.sm_clock_mhz for m in samples]
        assert r.sm_clock_mhz == (min(clocks), max(clocks))
        assert r.power_w == (40.0 + r.round, 40.0 + r.round)
        assert r.mem_clock_mhz == (6251, 6251)
        assert r.throttled_samples == (len(samples) if r.round == THROTTLED_ROUND else 0)

    report = make_report(gpu_like_run)
    assert report.telemetry == rounds
    assert report.environment.power_limit_w == POWER_LIMIT_W


@pytest.mark.slow
def test_bench_report_prints_the_rounds_range_against_the_ceilings(gpu_like_run):
    result = CliRunner().invoke(
        cli,
        ["report", gpu_like_run.name, "--dest", str(gpu_like_run.parent)],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("GPU per round"))
    configs = {
        m.config for m in read_csv(gpu_like_run / "results" / "measurements.csv", Measurement)
    }
    rounds = len(load_run(gpu_like_run).telemetry)
    last_round = max(r.round for r in load_run(gpu_like_run).telemetry)
    assert f"SM clock 1755–{SM_MAX_MHZ} MHz (max {SM_MAX_MHZ} MHz)" in line
    assert f"power 40–{40 + last_round} W (limit 72 W)" in line
    assert f"{len(configs)} of {rounds} rounds throttled" in line


@pytest.mark.slow
def test_a_cpu_run_has_no_rounds_of_gpu_readings(cpu_smoke_run, tmp_path):
    run = tmp_path / cpu_smoke_run.name
    shutil.copytree(cpu_smoke_run, run, ignore=shutil.ignore_patterns("report"))
    assert load_run(run).telemetry == []
    result = CliRunner().invoke(cli, ["report", run.name, "--dest", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "GPU per round" not in result.output


@pytest.mark.parametrize(
    "reading", [{"sm_clock_mhz": -1}, {"power_w": 1e9}, {"temperature_c": 5000}]
)
def test_a_reading_no_gpu_gives_is_refused(gpu_like_run, reading):
    """Each reading is bounded at the trust boundary, as every number a run hands back."""
    measurements = gpu_like_run / "results" / "measurements.csv"
    header, first, *rest = measurements.read_text().splitlines()
    cells = first.split(",")
    for name, value in reading.items():
        cells[header.split(",").index(name)] = str(value)
    measurements.write_text("\n".join([header, ",".join(cells), *rest]) + "\n")
    with pytest.raises(ResultsError, match="measurements.csv"):
        load_run(gpu_like_run)
