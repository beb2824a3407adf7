"""`bench report SWEEP` of a sweep whose GPU types timed several variants (issue 54, item 5):
one ranking per GPU and where they disagree, in text (80 columns) and in JSON.

The sweep is synthetic: the session's two real local runs (tests/e2e/conftest.py), fetched
once, stand in for an L4 and an H100 member, registered as one sweep; each manifest's plan
gains a second candidate (sdpa-extra16) and a ranking of the two, as a run on that GPU
would have written it (the report reads them through the same trust boundary as fetch)."""

from __future__ import annotations

import json
import shutil

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRecord
from results_schema.program_output import SweepReportOutput
from tests.e2e.test_eighty_columns import too_long

pytestmark = pytest.mark.timeout(120)

SWEEP = "sweep-20261122-081500-d4e5f6"
CANDIDATES = ["sdpa", "sdpa-extra16"]


def interval(point: float, low: float, high: float) -> dict:
    return {"speedup": point, "ci_low": low, "ci_high": high}


def ranking(leader: str, runner_up: str, versus: dict, configs: list[str]) -> dict:
    """Two candidates over sdpa-math on `configs`, as a run writes ranking.json (without
    its per-config intervals)."""
    tied = versus["ci_low"] <= 1
    return {
        "schema_version": "1",
        "baseline": "sdpa-math",
        "confidence": 0.95,
        "family": 3,
        "resamples": 2000,
        "method": "max-t-cluster-bootstrap",
        "description": "synthetic",
        "configs": configs,
        "per_config": False,
        "candidates": [
            {
                "identity": leader,
                "rank": 1,
                "geomean": interval(4.0, 3.6, 4.4),
                "configs": [],
                "versus_leader": None,
                "tied_with_leader": True,
            },
            {
                "identity": runner_up,
                "rank": 2,
                "geomean": interval(2.5, 2.3, 2.7),
                "configs": [],
                "versus_leader": versus,
                "tied_with_leader": tied,
            },
        ],
        "best": None if tied else leader,
        "tied": [leader, runner_up] if tied else [leader],
        "unranked": [],
    }


SEPARATED = interval(1.6, 1.4, 1.8)
TIED = interval(1.05, 0.9, 1.2)


@pytest.fixture
def sweep(bench_env, tmp_path, two_local_runs):
    """DEST and a function placing a ranking on each GPU's run: {gpu: (leader, runner-up,
    the leader's speedup over the runner-up with its interval)}."""
    dest = tmp_path / "results"
    shutil.copytree(two_local_runs["dest"], dest)
    from orchestrator.cli.options import make_context

    registry = make_context().registry
    members = dict(zip(["l4", "h100"], two_local_runs["run_ids"], strict=True))
    for gpu, run_id in members.items():
        registry.add(
            RunRecord(
                run_id,
                "gce",
                "gce-e2e",
                1.0,
                1.0,
                600,
                300,
                "2026-11-22T08:15:00+00:00",
                handle=f"vm-{gpu}",
                state="complete",
                sweep_id=SWEEP,
                gpu=gpu,
            )  # fmt: skip
        )

    def place(rankings: dict[str, tuple[str, str, dict]]) -> None:
        for gpu, placed in rankings.items():
            path = dest / members[gpu] / "manifest.json"
            manifest = json.loads(path.read_text())
            manifest["plan"]["compared_with"].append("sdpa-extra16")
            configs = [config["name"] for config in manifest["plan"]["configs"]]
            manifest["ranking"] = ranking(*placed, configs)
            path.write_text(json.dumps(manifest))

    return dest, place


def report(capsys, dest, *args) -> str:
    assert main(["report", SWEEP, "--dest", str(dest), *args]) == 0
    return capsys.readouterr().out


def test_each_gpu_ranks_its_own_and_another_best_is_named(sweep, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    dest, place = sweep
    place({"l4": ("sdpa", "sdpa-extra16", SEPARATED),
           "h100": ("sdpa-extra16", "sdpa", SEPARATED)})  # fmt: skip
    out = report(capsys, dest)
    on_l4, on_h100 = out.index("On l4:"), out.index("On h100:")
    assert out.index("Ranking: best: sdpa,", on_l4) < on_h100
    assert out.index("Ranking: best: sdpa-extra16,", on_h100) > on_h100
    across = out[out.index("Across GPU types") :]
    assert "best on l4: sdpa; best on h100: sdpa-extra16" in across.replace("\n  ", " ")
    words = " ".join(across.split())
    assert (
        "sdpa shown faster than sdpa-extra16 on l4; sdpa-extra16 shown faster than sdpa on h100"
        in words
    )
    assert too_long(out) == []  # 80 columns, a path aside (test_eighty_columns.py)

    output = SweepReportOutput.model_validate_json(report(capsys, dest, "--format", "json"))
    assert output.sweep_id == SWEEP
    by_gpu = {g.gpu: g.ranking for g in output.gpus}
    assert by_gpu["l4"]["best"] == "sdpa" and by_gpu["h100"]["best"] == "sdpa-extra16"
    assert [d.kind for d in output.disagreements] == ["best", "order"]
    assert output.disagreements[0].text == "best on l4: sdpa; best on h100: sdpa-extra16"


def test_a_tie_on_one_gpu_and_a_best_on_the_other(sweep, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    dest, place = sweep
    place({"l4": ("sdpa", "sdpa-extra16", TIED),
           "h100": ("sdpa", "sdpa-extra16", SEPARATED)})  # fmt: skip
    out = report(capsys, dest)
    words = " ".join(out.split())
    assert "tied on l4: sdpa, sdpa-extra16; best on h100: sdpa" in words
    assert "sdpa shown faster than" not in words  # l4 did not order the pair
    output = SweepReportOutput.model_validate_json(report(capsys, dest, "--format", "json"))
    assert [d.kind for d in output.disagreements] == ["best"]


def test_agreeing_gpus_say_so_and_an_unstarted_one_has_none(sweep, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    dest, place = sweep
    place({gpu: ("sdpa", "sdpa-extra16", SEPARATED) for gpu in ("l4", "h100")})
    from orchestrator.cli.options import make_context

    make_context().registry.add(
        RunRecord("20261122-081500-0a0b0c", "gce", "gce-e2e", 1.0, 1.0, 600, 300,
                  "2026-11-22T08:15:00+00:00", state="failed", sweep_id=SWEEP, gpu="t4")
    )  # fmt: skip
    words = " ".join(report(capsys, dest).split())
    assert "the rankings agree (best on l4: sdpa; best on h100: sdpa)" in words
    output = SweepReportOutput.model_validate_json(report(capsys, dest, "--format", "json"))
    by_gpu = {g.gpu: g.ranking for g in output.gpus}
    assert output.disagreements == [] and by_gpu["l4"] and by_gpu["h100"]
    assert by_gpu["t4"] is None


def test_a_sweep_has_no_markdown_gate(sweep, capsys):
    dest, _ = sweep
    assert main(["report", SWEEP, "--dest", str(dest), "--format", "markdown"]) == 2
    assert "a sweep's report is text or --format json" in capsys.readouterr().err
