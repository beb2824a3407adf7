"""results_schema: exported JSON Schemas in sync; the stdlib record tool matches the models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from results_schema import Manifest, Status, record
from results_schema.export import stale_files


def test_exported_json_schemas_are_in_sync():
    assert stale_files() == [], "run: python -m results_schema.export"


def run_record(*args: str) -> str:
    """The tool as the startup script runs it: the standard library alone (-I -S)."""
    tool = Path(record.__file__)
    return subprocess.run(
        [sys.executable, "-I", "-S", str(tool), *args], capture_output=True, text=True, check=True
    ).stdout


def test_status_written_by_the_record_tool_validates(tmp_path):
    run_record(
        "status",
        "--dir",
        str(tmp_path),
        "--run-id",
        "r1",
        "--phase",
        "build",
        "--state",
        "running",
        "--message",
        'quotes " and \\ and ünïcode',
        "--done",
        "3",
        "--total",
        "9",
    )
    status = Status.model_validate_json((tmp_path / "status.json").read_text())
    assert (status.phase, status.done, status.total) == ("build", 3, 9)
    assert status.message == 'quotes " and \\ and ünïcode'


def test_manifest_is_failed_without_samples_and_partial_with_them(tmp_path):
    (tmp_path / "phases.tsv").write_text("preflight\t1\t0\nenvironment\t2\t0\nbuild\t5\t2\n")
    cost = '{"backend": "gce", "rate_usd_per_hour": 0.3, "budget_usd": 1.0, "max_run_seconds": 100}'
    common = [
        "manifest",
        "--dir",
        str(tmp_path),
        "--run-id",
        "r1",
        "--cost-json",
        cost,
        "--started-at",
        "2026-11-22T08:00:00+00:00",
    ]
    assert (
        run_record(
            *common, "--exit-code", "2", "--reason", "phase build failed", "--failed-phase", "build"
        ).strip()
        == "failed"
    )
    manifest = Manifest.model_validate_json((tmp_path / "manifest.json").read_text())
    assert manifest.failed_phase == "build" and [p.exit_code for p in manifest.phases] == [0, 0, 2]
    assert manifest.cost.estimated_usd >= 0.3 / 60  # at least the one-minute minimum

    results = tmp_path / "results"
    results.mkdir()
    (results / "measurements.csv").write_text("a,b\n1,2\n3,4\n")
    assert run_record(*common, "--exit-code", "143", "--interrupted").strip() == "partial"
    manifest = Manifest.model_validate_json((tmp_path / "manifest.json").read_text())
    assert manifest.file("results/measurements.csv").rows == 2
