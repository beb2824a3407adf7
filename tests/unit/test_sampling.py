"""Sampling until decided (issue 49 item 2): the looks set before a run and the error each
spends (results_schema/sampling.py), the stopping rule on measurements (benches/sequential.py,
judged by the gate's rule with the real statistics), the record a run leaves and what the
controller holds it to, and the real harness on the CPU."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import numpy as np
import pytest

from benches.cli import main as benches_main
from benches.sequential import Sampling
from orchestrator import boundary
from orchestrator.errors import ResultsError
from results_schema import AttentionConfig, Comparison, CorrectnessRow, Manifest, Measurement, Plan
from results_schema.csvio import read_rows
from results_schema.models import SamplingRecord
from results_schema.sampling import FAMILY_ALPHA, look_alphas, look_confidence, look_schedule

NOW = datetime.now(timezone.utc)


def test_looks_double_up_to_the_bound_and_spend_the_error_by_the_samples_they_add():
    assert look_schedule(20, 80) == [20, 40, 80]
    assert look_schedule(50, 200) == [50, 100, 200]
    assert look_schedule(20, 50) == [20, 40, 50]
    assert look_schedule(20, 20) == [20]
    assert look_alphas([20, 40, 80]) == pytest.approx([0.0125, 0.0125, 0.025])
    for schedule in ([20, 40, 80], [20, 40, 50], [7], [3, 6, 12, 24, 48]):
        # Bonferroni: the chance any look's interval misses is at most their sum, 5%.
        assert sum(look_alphas(schedule)) == pytest.approx(FAMILY_ALPHA)
    assert look_confidence([20], 0) == pytest.approx(0.95)  # one look: as before
    assert look_confidence([20, 40, 80], 2) == pytest.approx(0.975)


def _plan(margin: float = 0.02, samples: int = 8, sampling: dict | None = None) -> Plan:
    configs = [
        AttentionConfig(
            name=f"c{i}", batch=1, heads=2, seq_len=17, head_dim=64, dtype="float32", causal=False
        )
        for i in range(3)
    ]
    return Plan.model_validate(
        {
            "name": "looks",
            "description": "",
            "device": "cpu",
            "candidate": "sdpa-math",
            "compared_with": ["sdpa"],
            "reference": "reference",
            "samples_per_config": samples,
            "placements": 2,
            "margin": margin,
            "comparison": Comparison(baseline="sdpa", source="implementation"),
            "sampling": sampling,
            "configs": configs,
        }
    )


def _measured(plan: Plan, samples: int, slowdown: float, rng) -> list[Measurement]:
    """Two placements a config; the candidate `slowdown` times the baseline's time, each
    sample off by 3%, each placement by 1%."""
    rows = []
    for config in plan.configs:
        for identity in plan.identities:
            shift = rng.lognormal(0, 0.01, 2)
            scale = slowdown if identity == plan.candidate else 1.0
            for i in range(samples):
                p = i * 2 // samples
                rows.append(Measurement(
                    run_id="r", config=config.name, implementation=identity, mode="single",
                    round=i, placement=p, calls=1, timestamp=NOW,
                    latency_ms=float(0.1 * scale * shift[p] * rng.lognormal(0, 0.03)),
                ))  # fmt: skip
    return rows


def test_a_clear_slowdown_stops_sampling_at_the_first_look():
    plan = _plan()
    sampling = Sampling.of(plan, [8] * 3, one_look=False, seconds_left=None)
    assert sampling.schedule == [8, 16, 32]
    rows = _measured(plan, 8, 1.25, np.random.default_rng(1))
    assert not sampling.after_look("r", rows, [], set(), (None, None))
    record = sampling.record()
    assert (record.stopped, record.looks, record.undecided) == ("decided", 1, [])
    assert record.confidence == pytest.approx(1 - FAMILY_ALPHA * 8 / 32)


def test_what_is_undecided_takes_the_next_look_until_the_bound():
    # Identical implementations at a margin of 0: the geometric mean can only be shown not
    # slower by an interval starting at 1 or above; sampling goes on to its bound.
    plan = _plan(margin=0.0)
    sampling = Sampling.of(plan, [8] * 3, one_look=False, seconds_left=None)
    rng = np.random.default_rng(2)
    assert sampling.after_look("r", _measured(plan, 8, 1.0, rng), [], set(), (None, None))
    assert (sampling.look, sampling.targets()) == (1, [16, 16, 16])
    assert sampling.blocks(plan.placements) == 2  # as many more placements as samples
    assert sampling.undecided == ["the geometric mean"]
    assert sampling.message() == "look 2/3, 0/1 decided"
    assert sampling.after_look("r", _measured(plan, 16, 1.0, rng), [], set(), (None, None))
    assert sampling.blocks(plan.placements) == 4
    assert not sampling.after_look("r", _measured(plan, 32, 1.0, rng), [], set(), (None, None))
    record = sampling.record()
    assert (record.stopped, record.looks, record.samples_per_config) == ("max-samples", 3, 32)
    assert record.undecided == ["the geometric mean"]
    assert "undecided: the geometric mean" in record.reason


def test_a_failed_candidate_or_the_time_cap_stops_sampling():
    plan, rng = _plan(margin=0.0), np.random.default_rng(3)
    rows = _measured(plan, 8, 1.0, rng)
    failed = CorrectnessRow(
        run_id="r", config="c1", implementation="sdpa-math", backend="x", passed=False
    )
    incorrect = Sampling.of(plan, [8] * 3, one_look=False, seconds_left=None)
    assert not incorrect.after_look("r", rows, [failed], set(), (None, None))
    assert incorrect.record().stopped == "incorrect"
    capped = Sampling.of(plan, [8] * 3, one_look=False, seconds_left=0.0)
    time.sleep(0.01)
    assert not capped.after_look("r", rows, [], set(), (None, None))
    assert capped.record().stopped == "time-cap"
    timed = _plan(margin=0.0, sampling={"max_seconds": 1e-3})
    by_plan = Sampling.of(timed, [8] * 3, one_look=False, seconds_left=3600.0)
    time.sleep(0.01)
    assert not by_plan.after_look("r", rows, [], set(), (None, None))
    assert by_plan.record().stopped == "max-seconds"


def test_nothing_to_decide_is_one_look_at_95_percent():
    no_ab = _plan().model_copy(update={"comparison": None})
    for plan, one_look in ((no_ab, False), (_plan(), True)):
        sampling = Sampling.of(plan, [8] * 3, one_look=one_look, seconds_left=None)
        assert sampling.schedule == [8]
        assert not sampling.after_look("r", [], [], set(), (None, None))
        record = sampling.record()
        assert (record.stopped, record.confidence) == ("nothing-to-decide", pytest.approx(0.95))


def _record(**update) -> dict:
    base = dict(
        stopped="decided",
        reason="r",
        schedule=[8, 16, 32],
        looks=2,
        samples_per_config=16,
        confidence=look_confidence([8, 16, 32], 1),
    )
    return {**base, **update}


@pytest.mark.parametrize(
    ("update", "refused"),
    [
        ({"looks": 4}, "4 looks taken of 3 set"),
        ({"schedule": [8, 12, 32]}, "is not one look_schedule sets"),
        ({"samples_per_config": 32}, "not the last look's"),
        ({"confidence": 0.95}, "is not look 2's"),
        ({"stopped": "max-samples"}, "max-samples before the last look"),
        ({"undecided": ["c0"]}, "decided with statistics undecided"),
    ],
)
def test_a_sampling_record_holds_together(update, refused):
    SamplingRecord.model_validate(_record())
    with pytest.raises(ValueError, match=refused):
        SamplingRecord.model_validate(_record(**update))


def _manifest(plan: Plan, record: dict, rows: int) -> bytes:
    files = [
        {"path": f"results/{name}", "sha256": "0" * 64, "bytes": 10, "rows": rows}
        for name in ("measurements.csv", "summary.csv", "correctness.csv", "timed_checks.csv")
    ]
    return json.dumps(
        {
            "schema_version": "1",
            "run_id": "20261129-120000-abcdef",
            "status": "complete",
            "finished_at": NOW.isoformat(),
            "plan": plan.model_dump(mode="json"),
            "sampling": record,
            "files": files,
        }
    ).encode()


def test_the_controller_holds_a_runs_sampling_to_its_plan():
    plan = _plan()  # looks at 8, 16, 32 samples a config; 3 configs × 2 identities
    good = _manifest(plan, _record(), rows=16 * 6)
    assert boundary.manifest_from(good, None).sampling.looks == 2
    for record, rows, said in (
        (
            _record(schedule=[8, 16], confidence=look_confidence([8, 16], 1)),
            16 * 6,
            "its plan sets \\[8, 16, 32\\]",
        ),
        (_record(), 16 * 6 + 1, "more than its sampling took"),
        (
            _record(
                stopped="nothing-to-decide",
                schedule=[32],
                looks=1,
                samples_per_config=32,
                confidence=0.95,
            ),
            32 * 6,
            "its plan sets \\[8\\]",
        ),  # fmt: skip
    ):
        with pytest.raises(ResultsError, match=said):
            boundary.manifest_from(_manifest(plan, record, rows), None)


def test_an_ab_run_decided_before_its_last_look_records_why_it_stopped(tmp_path):
    """The real harness on the CPU: SDPA's math path, about 4x slower than its default CPU
    path at S = 17, against it: shown slower before the last look (8 samples a config, of
    looks at 8, 16 and 32), so sampling stops there, and the run says so. Usually at the
    first look; a loaded machine (its placements' layouts each run's own) can leave the
    first look's interval too wide, as it did once in a full suite (2026-11-29)."""
    plan = _plan(samples=8).model_copy(update={"configs": _plan().configs[:2]})
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    assert benches_main(["run", "--plan", str(plan_path), "--out", str(tmp_path / "run")]) == 0
    run = tmp_path / "run"
    manifest = Manifest.model_validate_json((run / "manifest.json").read_text())
    looks = manifest.sampling.looks
    assert manifest.sampling.stopped == "decided" and looks in (1, 2)
    assert manifest.sampling.schedule == [8, 16, 32]
    # Looks 1 and 2 each spend 8 of 32 samples' share of the 5 %: 98.75 % intervals.
    assert manifest.statistics.confidence == manifest.sampling.confidence == 1 - 0.05 * 8 / 32
    assert "98.75% interval" in manifest.statistics.description
    rows = read_rows(run / "results" / "measurements.csv", Measurement)
    assert len(rows) == 8 * looks * len(plan.configs) * len(plan.identities)
    assert manifest.ab_overall().verdict == "slower"


def test_gating_every_config_splits_the_error_over_the_configs_too():
    """`--gate-on any` gates the geometric mean and each config: 1 + 3 statistics here,
    each judged at a quarter of the look's error (Bonferroni), so that the chance any of
    them calls identical trees slower stays the run's 5 %, not 5 % a config (at 95 % each,
    6 configs called identical trees slower in 4 of 36 runs, 2026-11-29). The record says
    the family, and the controller holds it to the plan."""
    plan = _plan(sampling={"decide_on": "any"})
    assert (plan.gate_family(), _plan().gate_family()) == (4, 1)
    sampling = Sampling.of(plan, [8] * 3, one_look=False, seconds_left=None)
    alphas = look_alphas([8, 16, 32])
    assert sampling.confidence == pytest.approx(1 - alphas[0] / 4)
    sampling.look = 1
    record = sampling.record()
    assert (record.family, record.confidence) == (4, pytest.approx(1 - alphas[1] / 4))
    with pytest.raises(ValueError, match="is not look 2's \\(for a family of 1\\)"):
        SamplingRecord.model_validate(record.model_dump() | {"family": 1})

    assert boundary.manifest_from(_manifest(plan, record.model_dump(), 16 * 6), None)
    geomean_only = _record()  # a family of one, at a look's whole share
    with pytest.raises(ResultsError, match="split its error over 1 statistics; its plan gates 4"):
        boundary.manifest_from(_manifest(plan, geomean_only, 16 * 6), None)
    # One look (nothing to decide) stays at 95 %, whatever it gates.
    one = Sampling.of(plan, [8] * 3, one_look=True, seconds_left=None).record()
    assert (one.family, one.confidence) == (1, pytest.approx(0.95))
