"""The phase-by-phase runtime model: sourced figures, the default L4 target, refinement."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from orchestrator import budget, runtime_model
from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError
from orchestrator.service.plans import resolve_plan
from results_schema import Manifest
from results_schema.record import billed_usd


def default_plan():
    plan, _ = resolve_plan("default", "gce")
    return plan


def test_every_phase_is_modelled_with_a_source():
    estimate = runtime_model.model_phases(default_plan(), "gce", "nvidia-l4")
    assert tuple(p.phase for p in estimate.phases) == runtime_model.MODEL_PHASES
    for figure in estimate.phases:
        assert figure.seconds > 0 and len(figure.source) > 10, figure


def test_default_spot_l4_run_fits_five_minutes_and_three_cents():
    config = BenchConfig()
    rate = budget.hourly_rate(config, spot=True).total
    for warm in (False, True):
        estimate = runtime_model.model_phases(
            default_plan(), "gce", config.accelerator_type, config.image_family, warm=warm
        )
        assert estimate.total_seconds <= 300
        assert billed_usd(rate, estimate.total_seconds) <= 0.03


def test_a_bare_cuda_image_pays_for_the_install_once():
    plan = default_plan()
    family = "common-cu129-ubuntu-2204-nvidia-580"
    first = runtime_model.model_phases(plan, "gce", "nvidia-l4", family)
    later = runtime_model.model_phases(plan, "gce", "nvidia-l4", family, warm=True)
    torch_image = runtime_model.model_phases(plan, "gce", "nvidia-l4", BenchConfig().image_family)
    environment = [e.seconds_of("environment") for e in (first, later, torch_image)]
    assert environment[0] > environment[1] > environment[2]
    assert later.seconds_of("build") < first.seconds_of("build")


def test_the_benchmark_phase_grows_with_the_plan():
    plan = default_plan()
    bigger = plan.model_copy(update={"samples_per_config": plan.samples_per_config * 2})
    base = runtime_model.model_phases(plan, "gce", "nvidia-l4").seconds_of("benchmark")
    assert runtime_model.model_phases(bigger, "gce", "nvidia-l4").seconds_of("benchmark") == (
        pytest.approx(2 * base)
    )


def test_an_unmodelled_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="no runtime model for nvidia-tesla-v100"):
        runtime_model.model_phases(default_plan(), "gce", "nvidia-tesla-v100")


def test_past_runs_replace_only_the_phases_they_recorded():
    model = runtime_model.model_phases(default_plan(), "gce", "nvidia-l4")
    past = [{"build": 4.0}, {"build": 8.0, "boot": 40.0}]
    refined = runtime_model.refine(model, [*past, {}])
    assert refined.seconds_of("build") == pytest.approx(8.0 * runtime_model.HISTORY_HEADROOM)
    assert "median of 2 past runs" in next(p for p in refined.phases if p.phase == "build").source
    assert refined.seconds_of("boot") == pytest.approx(40.0 * runtime_model.HISTORY_HEADROOM)
    assert refined.seconds_of("benchmark") == model.seconds_of("benchmark")


def test_a_manifest_gives_boot_and_the_script_phases_in_model_terms():
    created = datetime(2026, 11, 23, 6, 0, tzinfo=timezone.utc)
    manifest = Manifest.model_validate(
        {
            "schema_version": "1",
            "run_id": "20261123-060000-abcdef",
            "status": "complete",
            "started_at": (created + timedelta(seconds=50)).isoformat(),
            "finished_at": (created + timedelta(seconds=150)).isoformat(),
            "phases": [
                {"name": "preflight", "seconds": 2, "exit_code": 0},
                {"name": "environment", "seconds": 1, "exit_code": 0},
                {"name": "build", "seconds": 7, "exit_code": 0},
                {"name": "upload", "seconds": 1, "exit_code": 0},
                {"name": "finish", "seconds": 1, "exit_code": 0},
            ],
        }
    )
    seconds = runtime_model.recorded_phase_seconds(manifest, created, max_run_seconds=3600)
    assert seconds == {"boot": 52.0, "environment": 1.0, "build": 7.0, "upload": 2.0}


def test_a_baseline_tree_builds_twice_and_a_profile_adds_its_calls():
    from orchestrator.payload import package_dir
    from orchestrator.service.plan_options import PlanOptions, shape_plan

    plan, _ = resolve_plan("default", "gce")
    plain = runtime_model.model_phases(plan, "local")
    tree = str(package_dir("kernels"))  # a kernels/ directory as the baseline
    ab = shape_plan(plan, PlanOptions(baseline=tree, profile=())).plan
    model = runtime_model.model_phases(ab, "local")
    assert model.seconds_of("build") == 2 * plain.seconds_of("build")
    calls = 3 * 4  # three configs × flash, sdpa, sdpa-flash, flash@baseline
    # The baseline identity is timed too: the benchmark grows by its share; an A/B run may
    # sample until its bound (4x the plan's samples: results_schema/sampling.py); then the
    # profile.
    bound = ab.look_schedule()[-1] / plan.samples_per_config
    assert bound == 4
    timed = plain.seconds_of("benchmark") * len(ab.identities) / len(plan.identities) * bound
    assert model.seconds_of("benchmark") == pytest.approx(timed + calls * 9.0)
    assert "profile: 12 calls" in next(f.source for f in model.phases if f.phase == "benchmark")


def test_history_ignores_phase_times_no_run_could_take():
    """A registry written before fetch bounded phase times may hold 1e308 s: not history."""
    plan = default_plan()
    model = runtime_model.model_phases(plan, "gce", "nvidia-l4")
    poisoned = [{"benchmark": 1e308, "build": -5.0}]
    assert runtime_model.refine(model, poisoned) == model


def test_history_of_a_plan_of_other_content_is_not_used(tmp_path):
    from orchestrator.registry import RunRecord, RunRegistry

    plan = default_plan()
    other = plan.model_copy(update={"samples_per_config": 1})
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(
        RunRecord(
            run_id="20261125-120000-abcdef",
            backend="gce",
            plan=plan.name,  # the same name, other content
            plan_sha256=other.content_sha256(),
            budget_usd=1.0,
            rate_usd_per_hour=0.3,
            max_run_seconds=600,
            estimated_seconds=60,
            created_at="2026-11-25T12:00:00+00:00",
            state="complete",
            phase_seconds={"benchmark": 1.0},
        )
    )
    assert registry.past_phase_seconds(plan.content_sha256(), "gce") == []
    assert registry.past_phase_seconds(other.content_sha256(), "gce") == [{"benchmark": 1.0}]
    assert registry.past_phase_seconds("", "gce") == []  # a run of no checked plan
