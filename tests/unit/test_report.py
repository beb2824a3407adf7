"""`make_report` on a real cpu-smoke run's output: table rows, PNGs, run comparison."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ResultsError
from orchestrator.report import Disagreement, make_report
from results_schema import Plan

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benches",
            "run",
            "--plan",
            "cpu-smoke",
            "--out",
            str(out),
            "--measurements",
            "30",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_report_rows_and_pngs(run_dir):
    report = make_report(run_dir)
    assert report.status == "complete"
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    assert len(report.rows) == len(plan.configs) * len(plan.identities)
    baselines = [r for r in report.rows if r.implementation == "sdpa-math"]
    assert all(r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1] for r in baselines)
    assert report.statistics.method == "placement-cluster-bootstrap"
    assert "δ=0.01" in report.statistics.description
    assert report.control == "sdpa@aa"
    assert sum(report.control_verdicts().values()) == len(plan.configs)
    assert {p.name for p in report.plots} == {"latency.png", "speedup.png", "tflops.png"}
    for plot in report.plots:
        assert plot.parent == run_dir / "report"
        assert plot.read_bytes()[:8] == PNG_MAGIC


def test_a_run_agrees_with_itself(run_dir):
    report = make_report(run_dir, compare_dir=run_dir)
    assert report.compared_with == report.run_id
    assert report.disagreements == []


def test_shifted_run_is_flagged(run_dir, tmp_path):
    """A copy whose latencies are all 1000x larger: every median interval must disagree."""
    (tmp_path / "results").mkdir()
    for name in ("summary.csv", "correctness.csv"):
        (tmp_path / "results" / name).write_bytes((run_dir / "results" / name).read_bytes())
    lines = (run_dir / "results" / "measurements.csv").read_text().splitlines()
    column = lines[0].split(",").index("latency_ms")
    scaled = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        cells[column] = str(float(cells[column]) * 1000)
        scaled.append(",".join(cells))
    (tmp_path / "results" / "measurements.csv").write_text("\n".join(scaled) + "\n")
    report = make_report(run_dir, compare_dir=tmp_path)
    medians = {
        (d.config, d.implementation) for d in report.disagreements if d.quantity == "median_ms"
    }
    assert len(medians) == len(report.rows)
    assert all(isinstance(d, Disagreement) for d in report.disagreements)
    # this run's medians are 1000x smaller than the other's
    assert all(
        d.relative_difference < -0.99 for d in report.disagreements if d.quantity == "median_ms"
    )


def test_missing_results_is_a_results_error(tmp_path):
    with pytest.raises(ResultsError, match="fetch the run first"):
        make_report(tmp_path)


def test_report_does_not_import_torch():
    code = (
        "import sys; from pathlib import Path; import orchestrator.report as r; "
        "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
