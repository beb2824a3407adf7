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


def test_trees_that_differ_build_at_once_in_the_estimate_and_the_phases_bound(tmp_path):
    """Three env variants, each building its own copy of the tree (requirements, then
    `make`, 600 s each): the model counts one build's time, not three; the phase's bound is
    the longest tree's, where each tree has its own python (gce), and adds the requirements'
    installs where trees share one and take turns (local)."""
    from orchestrator.render import PHASE_TIMEOUTS, build_timeout_seconds
    from orchestrator.spec import RunSpec, new_run_id

    plan, _ = resolve_plan("default", "gce")
    ours = build_phase(plan)
    contract = GOOD.replace('devices = ["cpu"]', 'devices = ["cuda"]').replace("float32", "float16")
    contract = contract.replace(
        "[kernel.supports]",
        'build = "make"\nrequirements = ["ninja==1.11.1"]\nbuild_timeout = "10m"\n'
        "[kernel.variants]\n"
        + "".join(f'b{i} = {{ env = {{ BLOCK_M = "{i}" }} }}\n' for i in (16, 32, 64))
        + "[kernel.supports]",
    )
    variants = shape_plan(plan, PlanOptions(kernel=kernel_tree(tmp_path, contract))).plan
    assert len({k.directory for k in variants.kernel_folders()}) == 3
    figure = build_phase(variants)
    assert figure.seconds == ours.seconds
    assert figure.source.startswith("3 kernel trees, each: ") and "; 3 at once" in figure.source

    def bound(backend: str) -> int:
        spec = RunSpec(
            run_id=new_run_id(),
            backend=backend,
            plan=variants,
            owner="tester",
            budget_usd=1.0,
            rate_usd_per_hour=0.0,
            max_run_seconds=3600,
            estimated_seconds=300,
            payload_sha256="a" * 64,
        )
        return build_timeout_seconds(spec) - PHASE_TIMEOUTS["build"]

    assert bound("gce") == 600 + 600
    assert bound("local") == 3 * 600 + 600
