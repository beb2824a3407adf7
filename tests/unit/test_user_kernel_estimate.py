"""The runtime model counts a user's kernel's build: the build phase is not free because the
kernel is not ours."""

from __future__ import annotations

from orchestrator import runtime_model
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from tests.unit.test_kernel_contract import GOOD, kernel_tree


def build_phase(plan) -> runtime_model.PhaseFigure:
    model = runtime_model.model_phases(plan, "gce", "nvidia-l4")
    return next(figure for figure in model.phases if figure.phase == "build")


def test_a_user_kernel_with_a_build_command_is_estimated_as_one_build_of_ours(tmp_path):
    plan, _ = resolve_plan("default", "gce")
    ours = build_phase(plan)
    built = GOOD.replace("[kernel.supports]", 'build = "make"\n[kernel.supports]')
    built = built.replace('devices = ["cpu"]', 'devices = ["cuda"]').replace("float32", "float16")
    with_build = shape_plan(plan, PlanOptions(kernel=kernel_tree(tmp_path / "a", built))).plan
    figure = build_phase(with_build)
    assert figure.seconds == ours.seconds > 0
    assert figure.source.startswith("1 kernel tree, each: ")

    plain = GOOD.replace('devices = ["cpu"]', 'devices = ["cuda"]').replace("float32", "float16")
    without = shape_plan(plan, PlanOptions(kernel=kernel_tree(tmp_path / "b", plain))).plan
    assert build_phase(without).seconds == 0.0
