"""tools/gate/operating_point.py: the gate's decisions replayed on chunks of long runs, the
rates' intervals, the independence statistics and the L4 cost (issue 49, item 5)."""

from __future__ import annotations

import importlib.util
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from results_schema import AttentionConfig, Comparison, CorrectnessRow, Manifest, Measurement, Plan
from results_schema.models import Sampling

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "operating_point", REPO / "tools" / "gate" / "operating_point.py"
)
op = importlib.util.module_from_spec(_spec)
sys.modules["operating_point"] = op  # dataclasses resolve their module by name
_spec.loader.exec_module(op)

CANDIDATE, BASELINE, TWIN, CONTROL = "flash", "flash@baseline", "sdpa", "sdpa@aa"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
GATE = op.GateSpec(20, 4, 80)  # looks at 20, 40, 80 samples; 5 rounds a placement


def long_plan(rounds: int, per_placement: int = 5, configs: int = 2) -> Plan:
    shapes = [
        AttentionConfig(
            name=f"fp16-b4h16s{1024 * (i + 1)}d128", batch=4, heads=16,
            seq_len=1024 * (i + 1), head_dim=128, dtype="float16", causal=False,
        )
        for i in range(configs)
    ]  # fmt: skip
    return Plan(
        name="operating-point",
        description="synthetic long run",
        device="cuda",
        candidate=CANDIDATE,
        compared_with=[TWIN],
        reference="reference",
        samples_per_config=rounds,
        placements=rounds // per_placement,
        control=TWIN,
        comparison=Comparison(baseline=BASELINE, source="tree", ref="/base"),
        sampling=Sampling(max_samples_per_config=rounds),
        configs=shapes,
    )


def synthetic_run(
    run_id: str,
    kind: str,
    slowdown: float,
    rounds: int = 1200,
    placement_sd: float = 0.002,
    round_sd: float = 0.002,
    seed: int = 0,
    offset: float = 0.0,
    cut_last: int = 0,
) -> op.LongRun:
    """A long run of the four identities, the candidate `slowdown` times the baseline's
    time (1.0: identical), each sample log-normal around its placement's own level; the
    candidate's level shifted by `offset` (log) for the whole run; the last `cut_last`
    rows left out (a run cut short)."""
    plan = long_plan(rounds)
    rng = np.random.default_rng(seed)
    rows = []
    for c, config in enumerate(plan.configs):
        base = 0.4 * (c + 1)
        round_index = 0
        for placement in range(plan.placements):
            level = {n: rng.normal(0, placement_sd) for n in plan.identities}
            for _ in range(rounds // plan.placements):
                for name in rng.permutation(plan.identities):
                    factor = slowdown * math.exp(offset) if name == CANDIDATE else 1.0
                    ms = base * factor * math.exp(level[name] + rng.normal(0, round_sd))
                    rows.append(
                        Measurement(
                            run_id=run_id, config=config.name, implementation=str(name),
                            mode="single", round=round_index, placement=placement, calls=1,
                            latency_ms=ms, timestamp=NOW,
                        )
                    )  # fmt: skip
                round_index += 1
    if cut_last:
        rows = rows[:-cut_last]
    checks = [
        CorrectnessRow(
            run_id=run_id, config=config.name, implementation=name, backend="x", passed=True
        )
        for config in plan.configs
        for name in plan.identities
    ]
    manifest = Manifest(
        schema_version="1", run_id=run_id, status="complete", finished_at=NOW, plan=plan
    )
    return op.LongRun(run_id, kind, plan, rows, checks, manifest)


def test_the_gate_plan_lays_out_placements_of_equal_rounds():
    plan = op.gate_plan(long_plan(1200), GATE)
    assert plan.look_schedule() == [20, 40, 80]
    assert op.look_blocks(plan) == [[5] * 4, [5] * 4, [5] * 8]
    assert op.rounds_per_block(plan) == 5
    with pytest.raises(SystemExit):  # 30 samples over 4 placements: 8, 8, 7, 7
        op.rounds_per_block(op.gate_plan(long_plan(1200), op.GateSpec(30, 4, 60)))


@pytest.mark.slow
def test_identical_trees_pass_or_stay_undecided_and_never_systematically_alarm():
    run = synthetic_run("20261201-000000-aaaaaa", "identical", 1.0)
    decisions = op.decide_run(run, GATE, "looks")
    assert len(decisions) >= 15
    codes = [d.exit_code for d in decisions]
    assert set(codes) <= {0, 6, 7}
    assert codes.count(6) <= 1
    assert codes.count(0) >= len(codes) // 2
    assert all(0.97 < d.geomean < 1.03 for d in decisions)


@pytest.mark.slow
def test_a_ten_percent_slower_candidate_is_a_regression():
    run = synthetic_run("20261201-000000-bbbbbb", "slowed", 1.10, rounds=400)
    decisions = op.decide_run(run, GATE, "looks")
    assert len(decisions) >= 4
    assert [d.exit_code for d in decisions] == [6] * len(decisions)
    assert all(d.high < 0.98 for d in decisions)
    assert all(d.stopped == "decided" for d in decisions)


@pytest.mark.slow
def test_a_noisy_run_is_inconclusive_not_passed():
    run = synthetic_run("20261201-000000-cccccc", "identical", 1.0, rounds=400, round_sd=0.08)
    codes = [d.exit_code for d in op.decide_run(run, GATE, "looks")]
    assert codes and codes.count(7) == len(codes)


@pytest.mark.slow
def test_chunks_are_whole_placements_in_order_renumbered_and_disjoint():
    run = synthetic_run("20261201-000000-dddddd", "identical", 1.0, rounds=400)
    placements = op.Placements.of(run.plan, run.measurements)
    assert placements.usable(5) == 80
    chunk = placements.chunk(8, 16)
    for config in run.plan.configs:
        rows = [m for m in chunk if m.config == config.name]
        assert sorted({m.placement for m in rows}) == list(range(16))
        assert sorted({m.round for m in rows}) == list(range(80))
        for p in range(16):  # each renumbered placement is one original placement's rows
            mine = [m for m in rows if m.placement == p]
            assert len(mine) == 5 * len(run.plan.identities)
            assert {m.round // 5 for m in mine} == {p}
    originals = [m for m in run.measurements if 8 <= m.placement < 24]
    assert sorted(m.latency_ms for m in chunk) == sorted(m.latency_ms for m in originals)

    decisions = op.decide_run(run, GATE, "looks")
    spans = [(d.first_placement, d.first_placement + d.placements) for d in decisions]
    assert spans[0][0] == 0
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start == end  # consecutive, disjoint: the next starts where one stopped
    assert all(d.placements in (4, 8, 16) for d in decisions)
    assert spans[-1][1] <= 80
    fixed = op.decide_run(run, GATE, "bound")
    assert [d.first_placement for d in fixed] == [16 * i for i in range(5)]


def test_a_run_cut_short_gives_no_chunk_of_its_partial_placement():
    run = synthetic_run("20261201-000000-eeeeee", "identical", 1.0, rounds=400, cut_last=3)
    placements = op.Placements.of(run.plan, run.measurements)
    assert placements.usable(5) == 79  # the last placement of the last config lost a round
    assert len(op.decide_run(run, GATE, "bound")) == 4


@pytest.mark.slow
def test_decisions_never_cross_runs():
    runs = [
        synthetic_run("20261201-000000-ffff01", "identical", 1.0, rounds=200, seed=1),
        synthetic_run("20261201-000000-ffff02", "identical", 1.0, rounds=200, seed=2),
    ]
    decisions = op.decide_all(runs, GATE, "bound", jobs=1)
    assert [(d.run_id, d.first_placement) for d in decisions] == [
        (runs[0].run_id, 0), (runs[0].run_id, 16), (runs[1].run_id, 0), (runs[1].run_id, 16)
    ]  # fmt: skip


def test_lag1_tells_an_ar1_series_from_white_noise():
    rng = np.random.default_rng(3)
    white = rng.normal(size=400)
    ar = np.zeros(400)
    for t in range(1, 400):
        ar[t] = 0.8 * ar[t - 1] + rng.normal()
    assert op.lag1(ar) > 0.6
    assert abs(op.lag1(white)) < 2 / math.sqrt(400)
    assert op.lag1_permutation_p(ar) < 0.01
    assert op.lag1_permutation_p(white) > 0.05


@pytest.mark.slow
def test_anova_finds_a_between_run_offset_and_none_where_there_is_none():
    rng = np.random.default_rng(4)
    same = [rng.normal(0, 1, 40) for _ in range(4)]
    shifted = [rng.normal(mu, 1, 40) for mu in (-2, 0, 2, 4)]
    quiet, loud = op.anova(same), op.anova(shifted)
    assert quiet.p_permutation > 0.05 and quiet.icc < 0.1
    assert loud.p_permutation < 0.01 and loud.icc > 0.5
    assert loud.design_effect > 10
    assert op.anova([[1.0, 2.0]]) is None


@pytest.mark.slow
def test_independence_says_plainly_when_runs_differ():
    def decision(run, index, value):
        return op.Decision(run, "identical", index, 0, 4, 0, "pass", "decided", 1, 20,
                           1.0, 0.99, 1.01, 1.0, value)  # fmt: skip

    rng = np.random.default_rng(5)
    apart = [decision(f"r{r}", i, r * 0.01 + rng.normal(0, 0.001))
             for r in range(3) for i in range(30)]  # fmt: skip
    found = op.independence(apart)
    assert not found.independent and found.material_between["identical"]
    alike = [decision(f"r{r}", i, rng.normal(0, 0.001)) for r in range(3) for i in range(30)]
    assert op.independence(alike).independent


def test_rate_intervals():
    low, high = op.clopper_pearson(0, 100)
    assert low == 0.0 and high == pytest.approx(0.0362, abs=2e-4)
    low, high = op.clopper_pearson(5, 20)
    assert low == pytest.approx(0.0866, abs=2e-4) and high == pytest.approx(0.4910, abs=2e-4)
    assert op.clopper_pearson(20, 20)[1] == 1.0
    low, high = op.wilson(0, 100)
    assert low == 0.0 and high == pytest.approx(0.0370, abs=2e-4)


@pytest.mark.slow
def test_analysis_end_to_end_with_cost_on_an_l4():
    runs = [
        synthetic_run("20261201-000000-a00001", "identical", 1.0, rounds=400, seed=6),
        synthetic_run("20261201-000000-a00002", "identical", 1.0, rounds=400, seed=7),
        synthetic_run("20261201-000000-b00001", "slowed", 1.10, rounds=400, seed=8),
        synthetic_run("20261201-000000-b00002", "slowed", 1.10, rounds=400, seed=9),
    ]
    result = op.analyze(runs, GATE, "looks", jobs=1)
    rates = result["_rates"]
    assert rates["false_alarm"].count == 0 and rates["false_alarm"].decisions >= 10
    assert rates["power"].rate == 1.0
    speed = result["measured_speedup"]
    assert speed[runs[2].run_id] == pytest.approx(1 / 1.10, rel=0.01)
    assert speed[runs[0].run_id] == pytest.approx(1.0, abs=0.005)
    cost = result["cost_l4"]
    assert 0 < cost["usd_mean_warm"] <= cost["usd_mean_cold"] <= cost["usd_bound_cold"]
    text = op.render(result)
    assert "false alarm" in text and "lag-1" in text and "L4 cost" in text


def test_cost_grows_with_samples():
    plan = op.gate_plan(long_plan(400), GATE)
    few, _ = op.l4_cost(plan, 20, warm=True)
    many, _ = op.l4_cost(plan, 2000, warm=True)
    assert 0 < few < many


def test_the_long_plan_takes_one_look_of_whole_placements():
    base = {
        "name": "default", "description": "d", "device": "cuda", "candidate": "flash",
        "compared_with": ["sdpa", "sdpa-flash"], "reference": "reference",
        "samples_per_config": 50, "placements": 10, "control": "sdpa",
        "configs": [c.model_dump() for c in long_plan(20).configs],
    }  # fmt: skip
    made = Plan.model_validate(op.long_plan(base, [base["configs"][1]["name"]], 600, 5))
    assert made.look_schedule() == [600] and made.placements == 120
    assert made.identities == ["flash", "sdpa", "sdpa@aa"]  # the launch adds flash@baseline
    with pytest.raises(SystemExit):
        op.long_plan(base, ["nope"], 600, 5)
    with pytest.raises(SystemExit):
        op.long_plan(base, [base["configs"][0]["name"]], 601, 5)


def gate_run(run_id: str, kind: str, slowdown: float, series: str, launch_exit: int, seed: int):
    """A run of the gate plan itself (decisions_device.sh) that stopped at its first look:
    the first 4 placements of 5 rounds, the plan's looks 20, 40, 80."""
    run = synthetic_run(run_id, kind, slowdown, rounds=80, seed=seed)
    run.plan = op.gate_plan(run.plan, GATE)
    run.measurements = [m for m in run.measurements if m.placement < 4]
    run.series, run.launch_exit = series, launch_exit
    return run


@pytest.mark.slow
def test_a_run_of_the_gate_plan_is_one_decision_of_its_own_held_to_its_launchs_exit():
    run = gate_run("20261201-000001-aaaaaa", "identical", 1.0, "gpu0", 0, seed=11)
    assert op.is_gate_run(run.plan, op.gate_plan(run.plan, GATE))
    assert not op.is_gate_run(long_plan(400), op.gate_plan(long_plan(400), GATE))
    [decision] = op.decide_run(run, GATE, "looks")
    assert (decision.placements, decision.looks, decision.exit_code) == (4, 1, 0)
    assert (decision.series, decision.launch_exit) == ("gpu0", 0)

    wrong = gate_run("20261201-000002-aaaaaa", "identical", 1.0, "gpu0", 6, seed=12)
    result = op.analyze([run, wrong], GATE, "looks", jobs=1)
    assert result["replay_agrees"]["agree"] == 1
    assert result["replay_agrees"]["differ"] == [{"run": wrong.run_id, "replay": 0, "launch": 6}]
    assert "1 of 2 agree: differ" in op.render(result)


@pytest.mark.slow
def test_independence_of_gate_runs_is_read_across_their_lanes():
    def decision(series, index, value):
        return op.Decision(f"2026120{index:02d}-{series}", "identical", 0, 0, 4, 0, "pass",
                           "decided", 1, 20, 1.0, 0.99, 1.01, 1.0, value, series)  # fmt: skip

    rng = np.random.default_rng(13)
    lanes_apart = [decision(f"gpu{g}", i, g * 0.01 + rng.normal(0, 0.001))
                   for g in range(2) for i in range(30)]  # fmt: skip
    found = op.independence(lanes_apart)
    assert not found.independent and found.material_between["identical"]
    assert {row["run"] for row in found.per_run} == {"gpu0", "gpu1"}
    alike = [decision(f"gpu{g}", i, rng.normal(0, 0.001)) for g in range(2) for i in range(30)]
    assert op.independence(alike).independent


def test_a_listing_of_gate_runs_skips_a_launch_that_left_no_run(tmp_path):
    listing = tmp_path / "launches.tsv"
    listing.write_text("gpu0 identical 5 results-0/none\n")
    assert op.series_runs(listing) == []
    listing.write_text(f"gpu0 faster 0 {tmp_path}\n")
    with pytest.raises(SystemExit, match="kind 'faster'"):
        op.series_runs(listing)
