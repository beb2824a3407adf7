"""The service layer without the CLI: launch, wait, status views, fetch and stop-all over the
real local backend and store (the real startup script and payload, a tiny plan)."""

from __future__ import annotations

import pytest

from orchestrator import budget
from orchestrator.config import load_config
from orchestrator.errors import UsageError
from orchestrator.service.context import Context
from orchestrator.service.fetch import fetch_runs
from orchestrator.service.launch import LaunchRequest, launch, runtime_estimate
from orchestrator.service.launch_plan import new_spec, price
from orchestrator.service.plans import resolve_plan
from orchestrator.service.runs import views
from orchestrator.service.stop_all import find_machines, stop_machines
from orchestrator.service.wait import wait_for_run
from results_schema import Plan
from tests.e2e.test_local_run import small_plan


def one_placement_plan(tmp_path, **kwargs):
    """small_plan with one placement: its interval is a plain bootstrap, which stays positive
    however noisy a shared CPU is (the widened cluster interval of 4 placements need not)."""
    path = small_plan(tmp_path, **kwargs)
    plan = Plan.model_validate_json(path.read_text())
    path.write_text(plan.model_copy(update={"placements": 1}).model_dump_json())
    return path


pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def ctx(bench_env) -> Context:
    return Context(load_config())


def test_max_runtime_lowers_the_local_cap_and_never_raises_it(ctx):
    plan, _ = resolve_plan("cpu-smoke", "local")
    for asked, cap in [(None, 7200), (600, 600), (3 * 3600, 7200)]:
        estimate = runtime_estimate(ctx, "local", plan)
        rate, seconds = price(ctx, "local", 1.0, asked, estimate, spot=False)
        spec = new_spec(ctx, "local", plan, estimate, rate, seconds, False, budget_usd=1.0)
        assert (spec.max_run_seconds, rate, spec.rate_usd_per_hour) == (cap, None, 0.0)
    assert budget.LOCAL_DEFAULT_MAX_RUN_SECONDS == 7200


@pytest.mark.slow
def test_launch_wait_view_fetch_over_the_local_backend(ctx, tmp_path):
    plan = one_placement_plan(tmp_path)
    result = launch(ctx, LaunchRequest(budget_usd=1.0, plan=str(plan)), "local", "test")
    run_id = result.spec.run_id
    record = ctx.registry.get(run_id)
    assert (record.state, record.plan, record.max_run_seconds) == ("running", "tiny", 7200)
    assert record.sandbox == str(ctx.paths.sandbox(run_id))  # built from the spec

    seen = []
    final = wait_for_run(ctx, record, seen.append)
    assert final.manifest.status == "complete" and seen

    (view,) = views(ctx, run_id)
    phase, done, total = view.progress
    assert done == total and total > 0
    summary = view.as_dict()
    assert summary["state"] == "complete" and summary["cost_usd"] == 0.0

    fetched = []
    dest = tmp_path / "results"
    outcome = fetch_runs(ctx, None, False, dest, on_fetched=fetched.append)
    assert outcome.incomplete == [] and [r.run_id for r in fetched] == [run_id]
    assert (dest / run_id / "manifest.json").is_file()
    assert ctx.registry.get(run_id).state == "complete"
    again = fetch_runs(ctx, None, True, dest, on_fetched=fetched.append)  # --all: none left
    assert again.attempted == 0


@pytest.mark.slow
def test_stop_all_finds_and_ends_a_running_local_run(ctx, tmp_path):
    plan = one_placement_plan(tmp_path, samples=4000, heavy=True)
    run_id = launch(ctx, LaunchRequest(budget_usd=1.0, plan=str(plan)), "local", "test")
    run_id = run_id.spec.run_id
    found = find_machines(ctx)
    assert [m.run_id for m in found.machines["local"]] == [run_id]
    assert found.not_configured == {
        "GCE": "no project configured",
        "Cloud Batch": "no project configured",
    }
    stopped = stop_machines(ctx, found)
    assert stopped.count == 1 and stopped.failed == {}
    assert ctx.registry.get(run_id).state == "stopped"
    assert find_machines(ctx).count == 0


def test_fetch_refuses_an_unwritable_dest_before_reading_anything(ctx):
    with pytest.raises(UsageError, match="not a writable directory"):
        fetch_runs(ctx, "20260101-000000-abcdef", False, ctx.paths.root / "x" / "\0", print)


def test_the_record_carries_every_field_the_spec_and_record_share(ctx):
    from dataclasses import fields

    from orchestrator.registry import RunRecord

    plan, _ = resolve_plan("cpu-smoke", "local")
    estimate = runtime_estimate(ctx, "local", plan)
    rate, cap = price(ctx, "local", 2.5, None, estimate, spot=False)
    spec = new_spec(ctx, "local", plan, estimate, rate, cap, False, budget_usd=2.5)
    record = RunRecord(**spec.record_fields(), state="launching")
    shared = {f.name for f in fields(RunRecord)} & set(type(spec).model_fields)
    assert shared >= {"run_id", "backend", "budget_usd", "max_run_seconds", "spot"}
    for name in shared - {"plan", "created_at", "sweep_id"}:
        assert getattr(record, name) == getattr(spec, name), name
    assert (record.plan, record.created) == ("cpu-smoke", spec.created_at)
    assert record.sweep_id == ""  # no sweep: the registry's empty text, not None
