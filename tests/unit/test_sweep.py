"""The GPU catalog, the budget split and the payload's support rule, without a network."""

from __future__ import annotations

import pytest
import torch

from benches import registry
from benches.kernel_tree import declared_unavailable
from kernels import support
from orchestrator.backends.gce import pricing
from orchestrator.config import BenchConfig
from orchestrator.errors import RefusedError, UsageError
from orchestrator.gpus import (
    key_for_name,
    load_gpu_catalog,
    local_member,
    member_config,
    parse_gpu_list,
)
from orchestrator.runtime_model import (
    HISTORY_HEADROOM,
    PhaseFigure,
    RuntimeEstimate,
    history_key,
    model_phases,
)
from orchestrator.service.context import Context
from orchestrator.service.launch import LaunchRequest
from orchestrator.service.launch_plan import make_launch_plan
from orchestrator.service.plans import resolve_plan
from orchestrator.service.sweep import Member, check_shares, split_budget


def test_every_gpu_type_is_priced_modelled_and_sourced_in_three_regions():
    catalog = load_gpu_catalog()
    assert {k: (g.machine_type, g.accelerator_type, g.arch) for k, g in catalog.items()} == {
        "l4": ("g2-standard-4", "nvidia-l4", "sm_89"),
        "t4": ("n1-standard-4", "nvidia-tesla-t4", "sm_75"),
        "a100": ("a2-highgpu-1g", "nvidia-tesla-a100", "sm_80"),
        "h100": ("a3-highgpu-1g", "nvidia-h100-80gb", "sm_90"),
    }
    prices = pricing.load_catalog()["regions"]
    plan, _ = resolve_plan("default", "gce")
    for gpu in catalog.values():
        assert gpu.peak_tflops > 0 and "nvidia.com" in gpu.peak_tflops_source
        assert gpu.bandwidth_gb_s > 0 and "nvidia.com" in gpu.bandwidth_source
        # Its GPU's spot and on-demand prices, each with a source, in at least three regions.
        regions = [r for r in prices.values() if gpu.accelerator_type in r.get("gpus", {})]
        assert len(regions) >= 3
        for region in regions:
            entry = region["gpus"][gpu.accelerator_type]
            assert entry["spot"] > 0 and entry["on_demand"] > 0 and entry["source"]
        # Every zone it tries is priced, with its machine: launch can compute a cap.
        config = member_config(BenchConfig(), gpu)
        assert pricing.hourly_rate(config, spot=True).total > 0
        assert model_phases(plan, "gce", gpu.accelerator_type).total_seconds > 0


def test_the_one_gpu_a3_shape_is_spot_only():
    h100 = load_gpu_catalog()["h100"]
    assert h100.spot_only and "STANDARD" not in h100.provisioning
    config = member_config(BenchConfig(on_demand_fallback=True), h100)
    assert config.spot and not config.on_demand_fallback
    with pytest.raises(UsageError, match="not on-demand"):
        member_config(BenchConfig(spot=False), h100)
    assert member_config(BenchConfig(spot=False), load_gpu_catalog()["t4"]).spot is False


def test_gpu_lists_and_configured_zones():
    assert parse_gpu_list("L4, t4,l4") == ["l4", "t4"]
    with pytest.raises(UsageError, match="unknown GPU type v100"):
        parse_gpu_list("l4,v100")
    with pytest.raises(UsageError, match="at least one"):
        parse_gpu_list(" , ")
    t4 = load_gpu_catalog()["t4"]
    assert member_config(BenchConfig(), t4).zones == list(t4.zones)
    configured = BenchConfig(zones=["us-central1-f", "us-central1-a"])
    assert member_config(configured, t4).zones == ["us-central1-f", "us-central1-a"]
    with pytest.raises(UsageError, match="offered in none of the configured zones"):
        member_config(BenchConfig(zones=["us-central1-f"]), load_gpu_catalog()["h100"])


def test_the_local_backend_takes_only_this_machines_gpu():
    catalog = load_gpu_catalog()
    assert key_for_name("NVIDIA H100 80GB HBM3", catalog) == "h100"
    assert key_for_name("Tesla T4", catalog) == "t4"
    assert local_member(["local"], catalog, "NVIDIA H100 80GB HBM3") == "h100"
    assert local_member(["h100"], catalog, "NVIDIA H100 80GB HBM3") == "h100"
    assert local_member(["local"], catalog, "NVIDIA GeForce RTX 4090") == "local"
    assert local_member(["local"], catalog, None) == "local"
    for keys, name in ((["t4"], "NVIDIA H100 80GB HBM3"), (["l4", "t4"], None), (["l4"], None)):
        with pytest.raises(UsageError, match="the local backend runs on this machine's GPU"):
            local_member(keys, catalog, name)


def member(key: str, rate: float, seconds: int) -> Member:
    estimate = RuntimeEstimate((PhaseFigure("benchmark", seconds, "test"),))
    return Member(
        key,
        None,
        Context(BenchConfig()),
        pricing.HourlyRate(total=rate),
        estimate,
        pricing=pricing.ComputeEnginePricing,
    )


def test_the_budget_is_split_in_proportion_to_each_estimated_cost():
    members = split_budget(3.0, [member("a", 1.0, 600), member("b", 2.0, 600)])
    assert [m.share_usd for m in members] == pytest.approx([1.0, 2.0], abs=0.001)
    # Each share buys the same multiple of what its run needs.
    ratios = [m.share_usd / m.estimated_usd for m in members]
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-3)
    check_shares(LaunchRequest(budget_usd=3.0), members)


def test_a_share_short_of_its_run_refuses_naming_that_gpu():
    members = split_budget(0.30, [member("l4", 0.3, 200), member("h100", 3.4, 180)])
    with pytest.raises(RefusedError) as refused:
        check_shares(LaunchRequest(budget_usd=0.30), members)
    assert "l4's share" in str(refused.value) and "h100's share" in str(refused.value)
    # A time cap below one member's estimate refuses that member alone.
    members = split_budget(50.0, [member("t4", 0.25, 400), member("a100", 1.8, 200)])
    with pytest.raises(RefusedError) as refused:
        check_shares(LaunchRequest(budget_usd=50.0, max_runtime_seconds=300), members)
    assert "t4's share" in str(refused.value) and "a100's share" not in str(refused.value)
    assert "leave t4 out" in str(refused.value)


@pytest.mark.parametrize(
    ("capability", "reason"),
    [((7, 5), "unsupported on sm_75"), ((8, 0), None), ((8, 9), None), ((9, 0), None)],
)
def test_the_kernel_supports_sm80_and_newer(capability, reason, monkeypatch, tmp_path):
    from orchestrator.kernel_tree.own import own_kernel

    assert support.unsupported_reason(*capability) == reason
    assert support.main([f"{capability[0]}.{capability[1]}"]) == (1 if reason else 0)
    # Its contract says the same to the harness, from torch's view of the device.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    (flash,) = own_kernel("flash", None).kernels
    cuda = torch.device("cuda")
    assert declared_unavailable(flash, tmp_path / flash.directory, cuda) == reason
    assert registry.get("sdpa-flash").available(torch.device("cuda")) is None


def _past_run(registry, index: int, gpu: str, backend: str, build: float, plan_sha256: str):
    """A complete run of the default plan's content `plan_sha256` whose build took `build`."""
    from tests.unit.test_registry import _record

    registry.add(
        _record(
            f"20261127-07000{index}-abcdef",
            backend=backend,
            state="complete",
            phase_seconds={"build": build},
            plan_sha256=plan_sha256,
            gpu=gpu,
        )
    )


def test_history_refines_a_sweep_member_from_its_own_gpu_type_only(tmp_path):
    from orchestrator.registry import RunRegistry

    registry = RunRegistry(tmp_path / "runs.sqlite")
    for index, (gpu, build) in enumerate((("t4", 5.0), ("h100", 16.0), ("", 25.0))):
        _past_run(registry, index, gpu, "gce", build, "f" * 64)
    assert registry.past_phase_seconds("f" * 64, "gce", "t4") == [{"build": 5.0}]
    assert registry.past_phase_seconds("f" * 64, "gce") == [{"build": 25.0}]


def test_local_names_this_machines_gpu_and_is_no_gce_member(monkeypatch):
    from orchestrator.service.sweep import plan_members

    config = BenchConfig(project="bench-test-project", bucket="bench-bucket")
    with pytest.raises(UsageError, match="use --backend local"):
        request = LaunchRequest(budget_usd=1.0)
        planned = make_launch_plan(request.plan, "gce", request.options)
        plan_members(Context(config), ["local"], "gce", request, planned)


def test_a_plain_launch_and_a_sweep_member_share_their_gpus_history(monkeypatch, tmp_path):
    """Issue 31 item 3: one key for one GPU. A plain gce launch on the configured L4 and a
    `--gpu l4` sweep member file their history under `l4`; a plain local launch and
    `--gpu local` under this machine's GPU (the old plain launches filed it under "")."""
    from orchestrator.service import launch as launch_service
    from orchestrator.service.plans import resolve_plan
    from orchestrator.service.sweep import plan_members

    monkeypatch.setattr(launch_service, "local_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(
        "orchestrator.service.sweep.local_gpu_name", lambda: "NVIDIA H100 80GB HBM3"
    )
    config = BenchConfig(project="bench-test-project", bucket="bench-bucket", state_dir=tmp_path)
    ctx = Context(config)
    plan, _ = resolve_plan("default", "gce", has_gpu=True)
    _past_run(ctx.registry, 1, "l4", "gce", 777.0, history_key(plan))
    assert launch_service.target_gpu(ctx, "gce") == "l4"
    plain = launch_service.runtime_estimate(ctx, "gce", plan)
    request = LaunchRequest(budget_usd=5.0, plan="default")
    planned = make_launch_plan("default", "gce", request.options)
    (member,) = plan_members(ctx, ["l4"], "gce", request, planned)
    for estimate in (plain, member.estimate):
        assert estimate.seconds_of("build") == pytest.approx(777.0 * HISTORY_HEADROOM)

    _past_run(ctx.registry, 2, "h100", "local", 333.0, history_key(plan))
    assert launch_service.target_gpu(ctx, "local") == "h100"
    plain = launch_service.runtime_estimate(ctx, "local", plan)
    monkeypatch.setattr("orchestrator.service.plans.local_gpu_present", lambda: True)
    request = LaunchRequest(budget_usd=1.0, plan="default")
    planned = make_launch_plan("default", "local", request.options)
    (member,) = plan_members(ctx, ["local"], "local", request, planned)
    for estimate in (plain, member.estimate):
        assert estimate.seconds_of("build") == pytest.approx(333.0)  # free: no headroom
