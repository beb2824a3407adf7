"""The cost engine: catalog rates, what a budget buys, refusals."""

from __future__ import annotations

import pytest

from orchestrator import budget
from orchestrator.backends.gce import pricing
from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError, RefusedError, UsageError
from orchestrator.runtime_model import model_phases
from orchestrator.service.plans import resolve_plan


def test_spot_l4_rate_matches_the_catalog_sum():
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    disk = 100 * 0.10 / 730  # an image-sized disk is priced at the catalog's image_disk_gb
    # ... and every VM's external IPv4 address: $0.0025/h on spot, $0.005/h standard.
    assert rate.total == pytest.approx(0.05874 + 0.2231 + disk + 0.0025)
    assert rate.catalog_date and rate.region == "us-central1"
    assert rate.price_source == "bench's bundled price catalog, dated 2026-11-23"
    on_demand = pricing.hourly_rate(BenchConfig(), spot=False)
    assert on_demand.total == pytest.approx(0.14679 + 0.56004 + disk + 0.005)
    # The image's real size, once read, replaces the assumption.
    assert pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=50).disk == pytest.approx(
        50 * 0.10 / 730
    )


def test_one_dollar_buys_about_80_spot_minutes_and_its_worst_case_fits():
    # The worst case prices a spot machine at the on-demand rate (below): $1.00 buys what
    # on-demand prices allow, while the estimate (the likely bill) stays at spot prices.
    rate = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=50)
    seconds = pricing.max_run_seconds_for(1.00, rate)
    assert 1.2 * 3600 < seconds < 1.45 * 3600
    assert pricing.worst_case_usd(rate, seconds) <= 1.00 < pricing.worst_case_usd(rate, seconds + 1)


@pytest.mark.parametrize("spot", [True, False])
@pytest.mark.parametrize("disk_gb", [10, 50, 200])
@pytest.mark.parametrize("budget_usd", [0.05, 0.1, 0.33, 1.0, 7.77, 100.0])
def test_the_cap_is_the_longest_whose_worst_case_fits_the_budget(spot, disk_gb, budget_usd):
    rate = pricing.hourly_rate(BenchConfig(), spot=spot, disk_gb=disk_gb)
    cap = pricing.max_run_seconds_for(budget_usd, rate)
    if cap == 0:  # not even the disk's insert and delete fit: check_buys_a_start refuses it
        return
    assert pricing.worst_case_usd(rate, cap) <= budget_usd
    if cap < budget.MAX_RUN_SECONDS_CEILING:
        assert pricing.worst_case_usd(rate, cap + 1) > budget_usd


def test_the_worst_case_counts_late_termination_shutdown_minimum_and_the_disks_life():
    rate = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=50)
    items = dict(pricing.worst_case_items(rate, 3600))
    # Spot prices may change once a day, at an hour Google does not name, with no floor on
    # the discount: from the first second the most a spot machine bills is the on-demand rate.
    machine = 0.14679 + 0.56004
    assert items["machine and GPUs"] == pytest.approx(machine * (3600 + 30 + 90 + 60) / 3600)
    outside = 2 * 900  # the insert and the delete, each bounded by bench's wait
    assert items["boot disk"] == pytest.approx(50 * 0.10 / 730 * (3780 + outside) / 3600)
    assert items["external address"] == pytest.approx(0.0025 * (3780 + outside) / 3600)


def test_tiny_budget_is_refused_with_both_figures():
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    plan, _ = resolve_plan("default", "gce")
    estimated = model_phases(plan, "gce", "nvidia-l4").total_seconds
    cap = pricing.max_run_seconds_for(0.04, rate)
    with pytest.raises(RefusedError) as refused:
        pricing.check_covers(0.04, rate, estimated, cap)
    assert "$0.04" in str(refused.value) and "needs about" in str(refused.value)


def test_a_budget_that_cannot_boot_the_vm_is_a_usage_error():
    rate = pricing.hourly_rate(BenchConfig(), spot=True, disk_gb=50)
    pricing.check_buys_a_start(0.08, rate, boot_seconds=75)
    with pytest.raises(UsageError, match=r"budget \$0\.05 is too small for a gce run") as refused:
        pricing.check_buys_a_start(0.05, rate, boot_seconds=75)
    assert refused.value.exit_code == 2 and "raise --budget" in str(refused.value)
    assert "should spot prices rise to on-demand" in str(refused.value)


def test_unpriced_region_is_a_config_error():
    with pytest.raises(ConfigError, match="no prices for region asia-south1"):
        pricing.hourly_rate(BenchConfig(zones=["asia-south1-a"]), spot=True)


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


@pytest.mark.slow
def test_the_estimate_names_its_price_source_and_its_date(bench_env, capsys, monkeypatch):
    import json

    from orchestrator.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    source = "bench's bundled price catalog, dated 2026-11-23"
    assert main(["prices", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["price_source"] == source
    assert main(["prices"]) == 0
    out = capsys.readouterr().out
    (cost,) = [line for line in out.splitlines() if line.startswith("cost ")]
    cited = cost.split()[-1]  # the cost row cites its prices' note by number: "[10]"
    assert source in out[out.index(f"{cited} costs at") :].splitlines()[0]
