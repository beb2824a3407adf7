"""The harness on a real GPU: CUDA-event timing, graph mode, NVML telemetry, the gate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benches.writers import read_csv
from results_schema import CorrectnessRow, Measurement, SummaryRow

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

REPO = Path(__file__).resolve().parents[2]


def _config(name, s, d, dtype, causal, b=1, h=1):
    return {
        "name": name,
        "batch": b,
        "heads": h,
        "seq_len": s,
        "head_dim": d,
        "dtype": dtype,
        "causal": causal,
    }


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu")
    plan = {
        "name": "gpu-test",
        "description": "harness test",
        "device": "cuda",
        "candidate": "sdpa-efficient",
        "compared_with": ["sdpa", "sdpa-flash"],
        "reference": "reference",
        "samples_per_config": 20,
        "placements": 4,
        "control": "sdpa",
        "graph_below_us": 20.0,
        "configs": [
            _config("tiny", 128, 64, "float16", False),
            _config("mid", 1024, 128, "bfloat16", True, b=4, h=16),
            _config("fp32", 256, 64, "float32", False),  # sdpa-flash refuses fp32
        ],
    }
    (out / "plan.json").write_text(json.dumps(plan))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benches",
            "run",
            "--plan",
            str(out / "plan.json"),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_gate_records_a_refusal_and_goes_on(gpu_run):
    gate = read_csv(gpu_run / "results" / "correctness.csv", CorrectnessRow)
    refused = [r for r in gate if not r.passed]
    assert [(r.config, r.implementation) for r in refused] == [("fp32", "sdpa-flash")]
    rows = read_csv(gpu_run / "results" / "measurements.csv", Measurement)
    assert not [r for r in rows if (r.config, r.implementation) == ("fp32", "sdpa-flash")]
    assert sum(r.config == "fp32" for r in rows) == 3 * 20  # sdpa-efficient, sdpa, sdpa@aa


def test_tiny_kernels_use_graph_mode_and_large_ones_single(gpu_run):
    summary = {
        (s.config, s.implementation): s
        for s in read_csv(gpu_run / "results" / "summary.csv", SummaryRow)
    }
    assert {s.mode for (c, _), s in summary.items() if c == "tiny"} == {"graph"}
    assert {s.mode for (c, _), s in summary.items() if c == "mid"} == {"single"}
    rows = read_csv(gpu_run / "results" / "measurements.csv", Measurement)
    assert all(r.calls > 1 for r in rows if r.mode == "graph")


def test_telemetry_is_recorded_per_sample(gpu_run):
    pytest.importorskip("pynvml")
    rows = read_csv(gpu_run / "results" / "measurements.csv", Measurement)
    assert all(r.sm_clock_mhz and r.mem_clock_mhz and r.throttle_reasons is not None for r in rows)
    env = json.loads((gpu_run / "environment.json").read_text())
    assert env["gpu_uuid"].startswith("GPU-") and env["driver"]


def test_the_reports_data_holds_each_rounds_clocks_and_power(gpu_run):
    """Every round of every config has NVML's readings in the report's data, under the
    ceilings the fingerprint recorded; the fingerprint names the cuDNN torch loaded."""
    pytest.importorskip("pynvml")
    from orchestrator.report import load_run
    from results_schema import EnvironmentFingerprint

    rows = read_csv(gpu_run / "results" / "measurements.csv", Measurement)
    rounds = load_run(gpu_run).telemetry
    assert {(r.config, r.round) for r in rounds} == {(m.config, m.round) for m in rows}
    env = EnvironmentFingerprint.model_validate_json((gpu_run / "environment.json").read_text())
    for r in rounds:
        assert r.sm_clock_mhz and r.mem_clock_mhz and r.power_w, r
        assert r.sm_clock_mhz[1] <= env.sm_clock_max_mhz, (r, env.sm_clock_max_mhz)
    assert env.power_limit_w and env.mem_clock_max_mhz
    if torch.backends.cudnn.is_available():
        assert env.cudnn == str(torch.backends.cudnn.version())


def test_placements_and_the_control_are_in_the_summary(gpu_run):
    summary = read_csv(gpu_run / "results" / "summary.csv", SummaryRow)
    control = [s for s in summary if s.implementation == "sdpa@aa"]
    assert len(control) == 3 and all(s.versus == "sdpa" for s in control)
    assert all(s.placements == 4 for s in summary)
    assert all(s.verdict != "faster" and s.verdict != "slower" for s in control), control
    stats = json.loads((gpu_run / "statistics.json").read_text())
    assert stats["method"] == "placement-cluster-bootstrap" and stats["control"] == "sdpa@aa"


def test_single_launch_medians_agree_with_triton_do_bench(gpu_run):
    pytest.importorskip("triton")
    from tools.crosscheck import dobench

    result = dobench(gpu_run)
    assert result["max_abs_diff_single"] < 0.05, result["rows"]
