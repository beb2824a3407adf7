"""An A/B comparison through the real CLI, on both backends (CPU: two registry
implementations; the kernel-tree baseline needs a GPU and was run on the H100): local here,
gce in tests/e2e/test_backend_protocol.py's whole gce run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import Manifest
from tests.e2e.test_gce_cli import launched_run_id, plan_file

pytestmark = pytest.mark.timeout(240)


# The A/B flags, and what a fetched run launched with them must show.
AB_FLAGS = ["--candidate", "sdpa", "--baseline-impl", "sdpa-math"]


def test_two_implementations_compared_and_reported_first(bench_env, tmp_path, capsys, monkeypatch):
    """On the local backend; the whole gce run of tests/e2e/test_backend_protocol.py is
    launched with the same flags and checked by the same function (one gce run for both)."""
    args = ["launch", "--backend", "local", "--budget", "1", "--plan", plan_file(tmp_path)]
    assert main([*args, *AB_FLAGS, "--wait"]) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    dest = tmp_path / "results"
    assert main(["fetch", run_id, "--dest", str(dest)]) == 0
    assert_compared_and_reported_first(run_id, dest, capsys, monkeypatch)


def assert_compared_and_reported_first(run_id: str, dest: Path, capsys, monkeypatch) -> None:
    """The fetched run of a launch with AB_FLAGS: its manifest holds the comparison, and its
    report leads with it."""
    manifest = Manifest.model_validate_json((dest / run_id / "manifest.json").read_text())
    comparison = manifest.plan.comparison
    assert (comparison.baseline, comparison.source) == ("sdpa-math", "implementation")
    assert manifest.plan.compared_with[0] == "sdpa-math"
    overall = {o.identity: o for o in manifest.comparison}
    assert {"sdpa-math", "sdpa@aa"} <= set(overall)
    assert overall["sdpa-math"].versus == "sdpa" and overall["sdpa-math"].configs >= 1
    assert overall["sdpa-math"].ci_low <= overall["sdpa-math"].geomean

    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert main(["report", run_id, "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    # The A/B leads, after only the noise banner a loaded machine's run may carry.
    before = out[: out.index("A/B: sdpa against sdpa-math")]
    assert before == "" or before.startswith("noisy: verdicts not reliable")
    assert "overall: sdpa is" in out and "geometric mean over" in out
    assert out.index("overall:") < out.index(f"run {run_id}")  # it leads the report
