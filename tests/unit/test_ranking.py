"""The ranking of a run's candidates (benches.ranking) on synthetic runs whose truth is known:
a clearly faster variant is named best, two within noise are tied, and with only null
variants the chance that ANY of the family's intervals misses the truth stays near α."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from benches.ranking import rank, ranking_sides
from benches.stats import paired_speedup, summarize
from benches.writers import write_csv, write_manifest
from orchestrator.boundary import manifest_from
from orchestrator.cli.report_ranking import headline, interval_text
from orchestrator.errors import ResultsError
from results_schema import AttentionConfig, CorrectnessRow, Measurement, Plan, SummaryRow
from results_schema.ranking import Ranking
from tests.unit.test_noise_control import NOW

BASELINE = "base"


def _plan(variants: int, configs: int = 2, placements: int = 1, rounds: int = 24) -> Plan:
    """A baseline and `variants` candidates v0 (the plan's candidate), v1, ..., an A/A
    control of the baseline (left out of the ranking, as the reference is)."""
    return Plan(
        name="variants",
        description="",
        device="cpu",
        candidate="v0",
        compared_with=[BASELINE, "reference", *[f"v{i}" for i in range(1, variants)]],
        reference="reference",
        samples_per_config=placements * rounds,
        placements=placements,
        control=BASELINE,
        configs=[
            AttentionConfig(
                name=f"c{i}", batch=1, heads=2, seq_len=17 + i, head_dim=64,
                dtype="float32", causal=False,
            )
            for i in range(configs)
        ],
    )  # fmt: skip


def _run(plan: Plan, rng, speed: dict[str, float], noise: float = 0.05) -> list[Measurement]:
    """Each identity `speed` times as fast as the baseline (1 if not named): a drift shared
    by every identity of a round (what pairing cancels), a placement's own 2% shift, and
    each sample's own `noise` (log-normal, so the true median paired ratio is the speed)."""
    rounds = plan.samples_per_config // plan.placements
    rows = []
    for config in plan.configs:
        drift = rng.lognormal(0, 0.1, plan.samples_per_config)
        for identity in plan.identities:
            shift = rng.lognormal(0, 0.02 if plan.placements > 1 else 0, plan.placements)
            own = rng.lognormal(0, noise, plan.samples_per_config)
            latency = 0.05 / speed.get(identity, 1.0) * drift * own
            # Known valid, copied from one row: model_construct fills every default of every
            # row again (the 400-run simulations below: 230,400 rows, 3x the time of a copy).
            row = Measurement.model_construct(
                run_id="r", config=config.name, implementation=identity, mode="single",
                round=0, placement=0, calls=1, latency_ms=0.0, timestamp=NOW,
            )  # fmt: skip
            rows += [
                row.model_copy(
                    update={
                        "round": i,
                        "placement": i // rounds,
                        "latency_ms": float(latency[i] * shift[i // rounds]),
                    }
                )
                for i in range(plan.samples_per_config)
            ]
    return rows


def _intervals(ranking: Ranking):
    """Every interval of the family: speedups per config and on the mean, and the leader's
    over each other candidate (the ranking's pairs that decide the best and the tie)."""
    for candidate in ranking.candidates:
        yield candidate.geomean
        yield from candidate.configs
        if candidate.versus_leader:
            yield candidate.versus_leader


def test_the_baseline_and_what_is_ranked_against_it():
    plan = _plan(3)
    assert ranking_sides(plan) == (BASELINE, ["v0", "v1", "v2"])


def test_a_clearly_faster_variant_is_named_best():
    plan = _plan(3)
    rows = _run(plan, np.random.default_rng(1), {"v0": 1.0, "v1": 1.3, "v2": 1.05})
    ranking = rank(plan, rows, summarize("r", plan, rows, {}, None))
    assert [c.identity for c in ranking.candidates] == ["v1", "v2", "v0"]
    assert ranking.best == "v1" and ranking.tied == ["v1"]
    runner_up = ranking.candidates[1]
    assert runner_up.versus_leader.ci_low > 1  # the leader shown faster than the runner-up
    assert 1.2 < ranking.candidates[0].geomean.speedup < 1.4
    assert ranking.configs == ["c0", "c1"] and ranking.family == 3 * 2 + 3 + 3
    Ranking.model_validate_json(ranking.model_dump_json())  # what the boundary reads back


def test_two_variants_within_noise_are_tied_not_ranked_apart():
    plan = _plan(3)
    rows = _run(plan, np.random.default_rng(2), {"v0": 1.2, "v1": 1.2, "v2": 0.8})
    ranking = rank(plan, rows, summarize("r", plan, rows, {}, None))
    assert ranking.best is None
    assert sorted(ranking.tied) == ["v0", "v1"]
    slow = next(c for c in ranking.candidates if c.identity == "v2")
    assert not slow.tied_with_leader and slow.versus_leader.ci_low > 1 and slow.rank == 3


def test_a_variant_without_samples_is_left_out_with_its_reason():
    """A variant whose build or gate failed has no rows: the others are ranked."""
    plan = _plan(3)
    rows = [
        m for m in _run(plan, np.random.default_rng(3), {"v1": 1.3}) if m.implementation != "v2"
    ]
    ranking = rank(plan, rows, summarize("r", plan, rows, {}, None))
    assert [u.identity for u in ranking.unranked] == ["v2"]
    assert "no timed samples" in ranking.unranked[0].reason
    assert {c.identity for c in ranking.candidates} == {"v0", "v1"} and ranking.best == "v1"


def test_a_ranking_of_many_intervals_leaves_its_per_config_rows_out(monkeypatch):
    """Past the bound the manifest would outgrow its own (the family keeps them)."""
    monkeypatch.setattr("benches.ranking.MAX_CONFIG_INTERVALS", 5)
    plan = _plan(3)
    ranking = rank(plan, _run(plan, np.random.default_rng(7), {"v1": 1.3}), [])
    assert not ranking.per_config and ranking.family == 12
    assert all(c.configs == [] for c in ranking.candidates) and ranking.best == "v1"
    Ranking.model_validate_json(ranking.model_dump_json())


def test_a_ranking_that_contradicts_itself_is_refused():
    plan = _plan(2)
    rows = _run(plan, np.random.default_rng(4), {"v1": 1.3})
    data = rank(plan, rows, []).model_dump()
    data["best"] = "v0"  # not the leader
    with pytest.raises(ValidationError, match="best must be the leader"):
        Ranking.model_validate(data)


@pytest.mark.slow  # about 1.3 s of CPU each
@pytest.mark.parametrize(("placements", "rounds"), [(1, 24), (4, 6)])
def test_null_variants_miss_the_truth_family_wise_at_most_about_alpha(placements, rounds):
    """K = 3 variants as fast as the baseline, 2 configs: 12 intervals a run. Over 400 runs
    the share where any of them excludes 1 (the truth of every speedup and of every pair)
    is at most about α = 5%, where the per-interval 95% intervals of the same runs miss
    somewhere far more often."""
    plan, rng = _plan(3, placements=placements, rounds=rounds), np.random.default_rng(54)
    runs, family_misses, per_interval_misses = 400, 0, 0
    for _ in range(runs):
        rows = _run(plan, rng, {})
        ranking = rank(plan, rows, [], resamples=400)
        family_misses += any(i.excludes_one() for i in _intervals(ranking))
        per_interval_misses += any(_single_interval_misses(plan, rows))
    assert family_misses / runs <= 0.07, family_misses
    assert per_interval_misses / runs >= 0.15, per_interval_misses


def _single_interval_misses(plan: Plan, rows: list[Measurement]):
    """Each variant's speedup per config by its own 95% interval (benches.stats)."""
    by_key: dict[tuple[str, str], dict] = {}
    for m in rows:
        by_key.setdefault((m.config, m.implementation), {})[(m.placement, m.round)] = m.latency_ms
    for config in plan.configs:
        for variant in ("v0", "v1", "v2"):
            found = paired_speedup(
                by_key[(config.name, BASELINE)], by_key[(config.name, variant)], resamples=400
            )
            yield found.ci_low > 1 or found.ci_high < 1


def _written_run(tmp_path, plan: Plan, rows: list[Measurement]):
    (tmp_path / "results").mkdir()
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    write_csv(tmp_path / "results" / "measurements.csv", Measurement, rows)
    write_csv(
        tmp_path / "results" / "summary.csv", SummaryRow, summarize("r", plan, rows, {}, None)
    )
    for checks in ("correctness.csv", "timed_checks.csv"):
        write_csv(tmp_path / "results" / checks, CorrectnessRow, [])
    return write_manifest(tmp_path, "r", NOW)


def _renamed_config(ranking: dict) -> None:
    ranking["configs"][0] = "c9"
    for candidate in ranking["candidates"]:
        candidate["configs"][0]["config"] = "c9"


def _renamed_leader(ranking: dict, name: str) -> None:
    ranking["candidates"][0]["identity"] = ranking["tied"][0] = name
    ranking["best"] = name


def test_the_run_writes_its_ranking_and_the_manifest_carries_it(tmp_path):
    plan = _plan(3)
    manifest = _written_run(tmp_path, plan, _run(plan, np.random.default_rng(5), {"v2": 1.3}))
    assert manifest.ranking is not None and manifest.ranking.best == "v2"
    on_disk = Ranking.model_validate_json((tmp_path / "ranking.json").read_text())
    assert on_disk == manifest.ranking
    raw = (tmp_path / "manifest.json").read_bytes()
    assert manifest_from(raw, "r").ranking == on_disk  # through the boundary


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda r: _renamed_leader(r, "stranger"), "does not time"),
        (lambda r: _renamed_leader(r, "base"), "names an identity twice"),
        (lambda r: r["candidates"][1]["configs"].pop(), "lists the ranking's configs"),
        (_renamed_config, "configs its plan does not have"),
        (lambda r: r["candidates"][0]["geomean"].update(ci_low=-1.0), "greater than 0"),
        (lambda r: r.update(schema_version="2"), "schema_version"),
    ],
)
def test_the_boundary_refuses_a_ranking_its_plan_does_not_hold(tmp_path, change, refusal):
    plan = _plan(2)
    _written_run(tmp_path, plan, _run(plan, np.random.default_rng(6), {"v1": 1.3}))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    change(manifest["ranking"])
    with pytest.raises(ResultsError, match=refusal):
        manifest_from(json.dumps(manifest).encode(), "r")


def test_the_report_names_the_best_or_the_tie_with_the_interval_that_decides_it():
    plan = _plan(3)
    rows = _run(plan, np.random.default_rng(2), {"v0": 1.2, "v1": 1.2, "v2": 0.8})
    tie = rank(plan, rows, [])
    closest = tie.candidates[1]
    assert headline(tie) == (
        f"tied: {', '.join(tie.tied)}: the leader {tie.candidates[0].identity} is not shown "
        f"faster than {closest.identity} ({interval_text(closest.versus_leader)}), so no best "
        "is named"
    )
    rows = _run(plan, np.random.default_rng(1), {"v1": 1.3, "v2": 1.05})
    best = rank(plan, rows, [])
    assert headline(best).startswith("best: v1, shown faster than the runner-up v2 (")
