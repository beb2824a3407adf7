"""The cost engine: catalog rates, what a budget buys, refusals."""

from __future__ import annotations

import pytest

from orchestrator import budget
from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError, RefusedError
from orchestrator.runtime_model import model_phases
from orchestrator.service.plans import resolve_plan


def test_spot_l4_rate_matches_the_catalog_sum():
    rate = budget.hourly_rate(BenchConfig(), spot=True)
    disk = 100 * 0.10 / 730  # an image-sized disk is priced at the catalog's image_disk_gb
    assert rate.total == pytest.approx(0.05874 + 0.2231 + disk)
    assert rate.catalog_date and rate.region == "us-central1"
    on_demand = budget.hourly_rate(BenchConfig(), spot=False)
    assert on_demand.total == pytest.approx(0.14679 + 0.56004 + disk)


def test_one_dollar_buys_about_three_and_a_half_spot_hours():
    rate = budget.hourly_rate(BenchConfig(), spot=True).total
    seconds = budget.max_run_seconds_for(1.00, rate)
    assert 3.3 * 3600 < seconds < 3.6 * 3600
    # Never more than the budget: the cap plus the margin costs at most $1.00.
    assert (seconds + budget.BILLING_MARGIN_SECONDS) * rate / 3600 <= 1.00


def test_tiny_budget_is_refused_with_both_figures():
    rate = budget.hourly_rate(BenchConfig(), spot=True)
    plan, _ = resolve_plan("default", "gce")
    estimated = model_phases(plan, "gce", "nvidia-l4").total_seconds
    cap = budget.max_run_seconds_for(0.01, rate.total)
    with pytest.raises(RefusedError) as refused:
        budget.check_covers(0.01, rate, estimated, cap)
    assert "$0.01" in str(refused.value) and "needs about" in str(refused.value)


def test_unpriced_region_is_a_config_error():
    with pytest.raises(ConfigError, match="no prices for region asia-south1"):
        budget.hourly_rate(BenchConfig(zones=["asia-south1-a"]), spot=True)


def test_monthly_cap_counts_the_whole_budget_of_this_launch():
    budget.check_monthly_cap(10.0, spent_this_month=8.0, budget_usd=2.0)
    with pytest.raises(RefusedError, match="monthly cap"):
        budget.check_monthly_cap(10.0, spent_this_month=8.5, budget_usd=2.0)


def test_registry_reports_phase_times_of_complete_runs_only(tmp_path):
    from orchestrator.registry import RunRecord, RunRegistry

    registry = RunRegistry(tmp_path / "runs.sqlite")
    common = dict(
        plan="default",
        plan_sha256="f" * 64,
        budget_usd=1,
        rate_usd_per_hour=0.3,
        max_run_seconds=9,
        estimated_seconds=9,
        created_at="2026-11-22T08:00:00+00:00",
    )
    registry.add(
        RunRecord(
            run_id="a",
            backend="gce",
            state="complete",
            finished_at="2026-11-22T08:10:00+00:00",
            phase_seconds={"build": 30.0},
            **common,
        )
    )
    registry.add(
        RunRecord(
            run_id="b",
            backend="gce",
            state="failed",
            finished_at="2026-11-22T08:01:00+00:00",
            phase_seconds={"build": 1.0},
            **common,
        )
    )
    registry.add(
        RunRecord(
            run_id="c",
            backend="local",
            state="complete",
            finished_at="2026-11-22T08:02:00+00:00",
            phase_seconds={"build": 2.0},
            **common,
        )
    )
    assert registry.past_phase_seconds("f" * 64, "gce") == [{"build": 30.0}]
