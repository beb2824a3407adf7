"""Shipped plans validate, and plan names resolve as the CLI documents."""

from __future__ import annotations

import json

import pytest

from benches.plan import PLANS_DIR, PlanError, plan_names, resolve_plan, samples_per_config
from results_schema import Plan


@pytest.mark.parametrize("name", plan_names())
def test_every_shipped_plan_validates(name):
    plan = Plan.model_validate_json((PLANS_DIR / f"{name}.json").read_text())
    assert plan.name == name


def test_default_plan_is_the_documented_650_measurement_comparison():
    plan = resolve_plan("default")
    assert plan.device == "cuda"
    assert plan.samples_per_implementation() == 650 and len(plan.configs) == 13
    (grouped,) = [c for c in plan.configs if c.kv_heads]  # every run shows one GQA shape
    assert (grouped.heads, grouped.kv_heads, grouped.head_dim) == (32, 8, 128)
    assert plan.candidate == "flash" and plan.compared_with == ["sdpa", "sdpa-flash"]
    shapes = {(c.batch, c.heads, c.seq_len, c.head_dim) for c in plan.configs}
    assert (1, 1, 128, 64) in shapes  # the predecessor's shape
    assert {c.seq_len for c in plan.configs} >= {128, 8192}
    assert {c.head_dim for c in plan.configs} == {64, 128}
    assert {(c.dtype, c.causal) for c in plan.configs} == {
        (d, c) for d in ("float16", "bfloat16") for c in (False, True)
    }


def test_auto_falls_back_to_cpu_smoke_loudly(capsys):
    assert resolve_plan("auto", cuda_available=False).name == "cpu-smoke"
    assert "WARNING" in capsys.readouterr().err
    assert resolve_plan("auto", cuda_available=True).name == "default"


def test_plan_file_path_and_errors(tmp_path):
    data = json.loads((PLANS_DIR / "cpu-smoke.json").read_text())
    data["name"] = "mine"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    assert resolve_plan(str(path)).name == "mine"
    data["surprise"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="invalid"):
        resolve_plan(str(path))
    with pytest.raises(PlanError, match="unknown plan"):
        resolve_plan("no-such-plan")


def test_measurements_spread_over_configs():
    plan = resolve_plan("default")
    assert samples_per_config(plan, None) == [50] * 13
    assert samples_per_config(plan, 650) == [50] * 13
    counts = samples_per_config(plan, 100)
    assert sum(counts) == 100 and max(counts) - min(counts) == 1
    with pytest.raises(PlanError):
        samples_per_config(plan, 5)


def test_a_plan_file_of_before_the_rename_still_loads_and_is_written_anew():
    """Issue 31 item 5: `baselines` now means only the B of an A/B; the plan's list of what
    the candidate is compared with is `compared_with`, and an older plan file (or a fetched
    manifest's plan) that says `baselines` still validates."""
    data = json.loads((PLANS_DIR / "default.json").read_text())
    data["baselines"] = data.pop("compared_with")
    old = Plan.model_validate(data)
    assert old.compared_with == ["sdpa", "sdpa-flash"]
    written = json.loads(old.model_dump_json())
    assert "baselines" not in written and written["compared_with"] == ["sdpa", "sdpa-flash"]
    assert Plan.model_validate(written) == old
