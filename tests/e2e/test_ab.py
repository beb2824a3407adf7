"""An A/B comparison through the real CLI, on both backends (CPU: two registry
implementations; the kernel-tree baseline needs a GPU and was run on the H100): local here,
gce in tests/e2e/test_backend_protocol.py's whole gce run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import Manifest

pytestmark = pytest.mark.timeout(240)


# The A/B (candidate, baseline), the flags that launch it, and what a fetched run launched
# with them must show: the candidate's A/A control keeps the plan's control (sdpa).
CANDIDATE, BASELINE = "sdpa-math", "sdpa"
AB_FLAGS = ["--candidate", CANDIDATE, "--baseline-impl", BASELINE]


def test_two_implementations_compared_and_reported_first(
    bench_env, tmp_path, capsys, monkeypatch, gated_slower_run
):
    """On the local backend: the session's gated run (tests/e2e/conftest.py: AB_FLAGS on
    plan_file's plan, judged at a margin besides), fetched here from a copy of its state.
    The whole gce run of tests/e2e/test_backend_protocol.py is launched with the same flags
    and checked by the same function (one gce run for both)."""
    assert " ".join(AB_FLAGS) in " ".join(gated_slower_run["launch_args"])
    root = Path(gated_slower_run["root"])
    shutil.copytree(root / "state", bench_env / "state", symlinks=True)
    run_id = gated_slower_run["run_id"]
    dest = tmp_path / "results"
    assert main(["fetch", run_id, "--dest", str(dest)]) == 0
    assert_compared_and_reported_first(run_id, dest, capsys, monkeypatch)


def assert_compared_and_reported_first(run_id: str, dest: Path, capsys, monkeypatch) -> None:
    """The fetched run of a launch with AB_FLAGS: its manifest holds the comparison, and its
    report leads with it."""
    manifest = Manifest.model_validate_json((dest / run_id / "manifest.json").read_text())
    comparison = manifest.plan.comparison
    assert (comparison.baseline, comparison.source) == (BASELINE, "implementation")
    assert manifest.plan.compared_with[0] == BASELINE
    overall = {o.identity: o for o in manifest.comparison}
    assert {BASELINE, "sdpa@aa"} <= set(overall)
    assert overall[BASELINE].versus == CANDIDATE and overall[BASELINE].configs >= 1
    assert overall[BASELINE].ci_low <= overall[BASELINE].geomean

    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert main(["report", run_id, "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    # The A/B leads, after only the noise banner a loaded machine's run may carry.
    before = out[: out.index(f"A/B: {CANDIDATE} against {BASELINE}")]
    assert before == "" or before.startswith("noisy: verdicts not reliable")
    assert f"overall: {CANDIDATE} is" in out and "geometric mean over" in out
    assert out.index("overall:") < out.index(f"run {run_id}")  # it leads the report
