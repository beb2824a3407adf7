"""The A/A control judged once per run (benches.noise): its family-wise false-alarm rate on
synthetic runs, what makes a run noisy, and the manifest that carries the decision."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pytest

from benches.noise import control_noise
from benches.stats import summarize
from benches.writers import write_csv, write_manifest
from results_schema import AttentionConfig, Manifest, Measurement, Plan, SummaryRow

NOW = datetime.now(timezone.utc)


def _plan(configs: int = 6, placements: int = 4, rounds: int = 5) -> Plan:
    return Plan(
        name="aa",
        description="",
        device="cpu",
        candidate="sdpa",
        compared_with=["sdpa-math"],
        reference="reference",
        samples_per_config=placements * rounds,
        placements=placements,
        margin=0.01,  # what these were measured at: the noise rule, not the default margin
        control="sdpa",
        configs=[
            AttentionConfig(
                name=f"c{i}", batch=1, heads=2, seq_len=17 + i, head_dim=64,
                dtype="float32", causal=False,
            )
            for i in range(configs)
        ],
    )  # fmt: skip


def _run(plan: Plan, rng, control_shift: float = 1.0, waits=None) -> list[Measurement]:
    """Identical implementations on a noisy machine: each placement moves each identity by
    its own 2% factor, each sample by 5%; the control's samples times `control_shift`, and
    `waits(config)` an extra factor per sample of every identity (a loaded machine's
    regime)."""
    rounds = plan.samples_per_config // plan.placements
    rows = []
    for config in plan.configs:
        for identity in plan.identities:
            shift = rng.lognormal(0, 0.02, plan.placements)
            scale = 3.0 if identity == "sdpa-math" else 1.0
            scale *= control_shift if identity == "sdpa@aa" else 1.0
            extra = np.ones(plan.samples_per_config) * (waits(config.name) if waits else 1)
            for i in range(plan.samples_per_config):
                p, r = divmod(i, rounds)
                latency = 0.05 * scale * shift[p] * rng.lognormal(0, 0.05) * extra[i]
                rows.append(Measurement(
                    run_id="r", config=config.name, implementation=identity, mode="single",
                    round=i, placement=p, calls=1, latency_ms=float(latency), timestamp=NOW,
                ))  # fmt: skip
    return rows


def _noise(plan, rows):
    return control_noise(plan, rows, summarize("r", plan, rows, {}, None))


@pytest.mark.slow
def test_identical_implementations_raise_few_family_wise_false_alarms():
    plan, rng = _plan(), np.random.default_rng(51)
    alarms, per_row = 0, 0
    for _ in range(60):
        rows = _run(plan, rng)
        summary = summarize("r", plan, rows, {}, None)
        noise = control_noise(plan, rows, summary)
        assert len(noise.intervals) == 7 and noise.confidence == 0.95  # 6 configs, their mean
        alarms += noise.verdict == "noisy"
        per_row += any(r.implementation == "sdpa@aa" and r.verdict in ("faster", "slower")
                       for r in summary)  # fmt: skip
    assert alarms <= 3, alarms  # ≤ 5% of runs (1 of 100 when this was written)
    assert per_row >= 6, per_row  # the per-row rule: 18 of 100


def test_a_control_that_differs_makes_the_run_noisy_at_its_margin_only():
    plan = _plan()
    noise = _noise(plan, _run(plan, np.random.default_rng(52), control_shift=1.1))
    assert noise.verdict == "noisy" and noise.margin == 0.01
    assert "judged different from its twin" in noise.reason
    assert {i.config for i in noise.different(0.01)} >= {None}  # the mean, at least
    assert noise.different(0.25) == []  # the gate at a 25% margin re-judges it quiet


@pytest.mark.slow
@pytest.mark.parametrize(("bimodal", "verdict"), [(6, "noisy"), (4, "noisy"), (3, "quiet")])
def test_a_control_with_most_rows_bimodal_cannot_vouch_for_the_run(bimodal, verdict):
    plan, rng = _plan(), np.random.default_rng(53)
    waited = {c.name for c in plan.configs[:bimodal]}

    def waits(config):  # 8 of 20 calls wait for a core, on the first `bimodal` configs
        return rng.permutation(np.r_[np.ones(12), np.full(8, 150.0)]) if config in waited else 1

    noise = _noise(plan, _run(plan, rng, waits=waits))
    assert noise.unjudged == sorted(waited) and noise.verdict == verdict
    if verdict == "noisy":
        assert f"could judge only {6 - bimodal} of 6 configs" in noise.reason


def test_a_plan_without_a_control_has_no_noise_decision():
    plan = _plan().model_copy(update={"control": None})
    assert _noise(plan, _run(plan, np.random.default_rng(54))) is None


def test_the_manifest_carries_the_decision(tmp_path):
    plan = _plan(configs=2)
    rows = _run(plan, np.random.default_rng(55))
    (tmp_path / "results").mkdir()
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    write_csv(tmp_path / "results" / "measurements.csv", Measurement, rows)
    write_csv(
        tmp_path / "results" / "summary.csv", SummaryRow, summarize("r", plan, rows, {}, None)
    )
    manifest = write_manifest(tmp_path, "r", NOW)
    assert manifest.noise is not None and manifest.noise.verdict == "quiet"
    on_disk = Manifest.model_validate_json((tmp_path / "manifest.json").read_text())
    assert on_disk.noise == manifest.noise
    assert json.loads((tmp_path / "noise.json").read_text())["control"] == "sdpa@aa"
