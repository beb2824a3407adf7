"""An A/B comparison through the real CLI, on both backends (CPU: two registry
implementations; the kernel-tree baseline needs a GPU and was run on the H100)."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from results_schema import Manifest
from tests.e2e.test_gce_cli import launched_run_id, plan_file

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("backend", ["local", "gce"])
def test_two_implementations_compared_and_reported_first(
    backend, request, bench_env, tmp_path, capsys, monkeypatch
):
    if backend == "gce":
        request.getfixturevalue("gce")
    monkeypatch.setenv("COLUMNS", "200")
    args = ["launch", "--backend", backend, "--budget", "1", "--plan", plan_file(tmp_path)]
    args += ["--candidate", "sdpa", "--baseline-impl", "sdpa-math", "--wait"]
    assert main(args) == 0, capsys.readouterr()
    run_id = launched_run_id(capsys)
    dest = tmp_path / "results"
    assert main(["fetch", run_id, "--dest", str(dest)]) == 0
    manifest = Manifest.model_validate_json((dest / run_id / "manifest.json").read_text())
    comparison = manifest.plan.comparison
    assert (comparison.baseline, comparison.source) == ("sdpa-math", "implementation")
    assert manifest.plan.baselines[0] == "sdpa-math"
    overall = {o.identity: o for o in manifest.comparison}
    assert {"sdpa-math", "sdpa@aa"} <= set(overall)
    assert overall["sdpa-math"].versus == "sdpa" and overall["sdpa-math"].configs >= 1
    assert overall["sdpa-math"].ci_low <= overall["sdpa-math"].geomean

    capsys.readouterr()
    assert main(["report", run_id, "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    # The A/B leads, after only the noise banner a loaded machine's run may carry.
    before = out[: out.index("A/B: sdpa against sdpa-math")]
    assert before == "" or before.startswith("noisy: verdicts not reliable")
    assert "overall: sdpa is" in out and "geometric mean over" in out
    assert out.index("overall:") < out.index(f"run {run_id}")  # it leads the report
