"""A run whose A/A control says the machine was noisy says so where a user looks: one line
in `bench status`, the first line of `bench report`; a quiet run says nothing of the kind."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from orchestrator.config import load_config
from orchestrator.service.context import Context
from orchestrator.spec import new_run_id
from results_schema.models import ControlInterval, Noise
from tests.e2e.test_untrusted_runs import build_run, publish
from tests.unit.test_input_validation import run_cli

BANNER = "noisy: verdicts not reliable"


def _noise(verdict: str) -> dict:
    interval = (1.05, 1.03, 1.07) if verdict == "noisy" else (1.0, 0.99, 1.01)
    return Noise(
        control="sdpa@aa",
        verdict=verdict,
        reason=f"made up: the control was {verdict}",
        margin=0.02,
        confidence=0.95,
        intervals=[
            ControlInterval(
                config=config, speedup=interval[0], ci_low=interval[1], ci_high=interval[2]
            )
            for config in ("made-up-config", None)
        ],  # fmt: skip
        method="made up",
    ).model_dump(mode="json")


@pytest.mark.slow
@pytest.mark.parametrize("verdict", ["noisy", "quiet"])
def test_a_noisy_run_says_so_in_status_and_first_in_its_report(bench_env, capsys, verdict):
    ctx = Context(load_config())
    run = build_run(new_run_id(), "local", bench_env / "outside")
    run.manifest["noise"] = _noise(verdict)
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=3))

    code, out, err = run_cli(capsys, "status")
    assert code == 0, err
    said = [line for line in out.splitlines() if BANNER in line]
    assert run_cli(capsys, "fetch", run.run_id, "--dest", "results")[0] == 0
    code, report, err = run_cli(capsys, "report", run.run_id, "--dest", "results")
    assert code == 0, err
    if verdict == "quiet":
        assert said == [] and BANNER not in report
        return
    assert len(said) == 1 and said[0].startswith(f"{run.run_id}: {BANNER}"), out
    assert "the control was noisy" in said[0]
    assert report.splitlines()[0].startswith(BANNER), report
    # What to do about it, wherever it is said (issue 52).
    assert said[0].endswith("--samples N), larger shapes, a quieter machine, or a GPU run")
    assert "to fix: more samples (--samples N)" in " ".join(report.split())
