"""Plans are checked on the controller against what the target runs, exit 2 before anything
is created; the controller's view of the target matches the payload's registry."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import main
from orchestrator.service.plans import local_gpu_present, plans_dir
from results_schema import implementations, targets


def write_plan(tmp_path, **changes):
    plan = json.loads((plans_dir() / "default.json").read_text())
    configs = changes.pop("config", None)
    if configs is not None:
        plan["configs"] = [{**plan["configs"][0], **configs}]
    plan.update(changes)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return str(path)


@pytest.fixture
def gce_settings(bench_env, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", "bench-test-project")
    monkeypatch.setenv("BENCH_BUCKET", "bench-test-bucket")
    return bench_env


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"config": {"head_dim": 7}}, "unsupported: head_dim 7 (it supports 64, 128, 256)"),
        ({"config": {"dtype": "float32"}}, "unsupported: dtype float32 (it supports float16,"),
        ({"candidate": "flash-v9"}, "unknown implementation 'flash-v9'"),
        ({"warmup_min": 60, "warmup_max": 50}, "warmup_min 60 exceeds warmup_max 50"),
        ({"device": "cpu"}, "flash runs on cuda only (its supports.devices)"),
    ],
)
def test_a_plan_the_target_cannot_run_is_exit_2_before_anything_exists(
    gce_settings, tmp_path, capsys, changes, expected
):
    plan = write_plan(tmp_path, **changes)
    # No stand-in is running: a request would fail with exit 4, not 2.
    assert main(["launch", "--backend", "gce", "--budget", "5", "--plan", plan]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not (gce_settings / "state").exists()


@pytest.mark.skipif(local_gpu_present(), reason="this machine has a GPU")
def test_the_gpu_plan_on_a_machine_without_one_is_exit_2(bench_env, capsys):
    assert main(["launch", "--backend", "local", "--budget", "1", "--plan", "default"]) == 2
    assert "no CUDA GPU here (try --plan cpu-smoke)" in capsys.readouterr().err
    assert not (bench_env / "state").exists()


def test_samples_past_the_local_time_cap_are_exit_2(bench_env, tmp_path, capsys):
    plan = json.loads((plans_dir() / "cpu-smoke.json").read_text())
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({**plan, "samples_per_config": 10**9}))
    assert main(["launch", "--backend", "local", "--budget", "1", "--plan", str(path)]) == 2
    assert "more than the local time cap of 2h00m" in capsys.readouterr().err
    assert not (bench_env / "state").exists()


def test_samples_past_what_the_budget_buys_are_refused_exit_3(gce_settings, tmp_path, capsys):
    plan = write_plan(tmp_path, samples_per_config=10**9)
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 3
    assert "raise --budget or choose a smaller plan" in capsys.readouterr().err


def test_the_controllers_view_of_the_target_matches_the_payloads_registry():
    import torch

    from benches import registry

    assert set(implementations.IMPLEMENTATIONS) == set(registry.NAMES)
    cpu = torch.device("cpu")
    needs_cuda = {name for name in registry.NAMES if registry.get(name).available(cpu)}
    assert needs_cuda == set(implementations.CUDA_ONLY)


def test_our_kernels_contract_says_what_its_code_supports():
    """kernels/bench-kernel.toml is what the launch checks and the harness obey: it must
    say what the binding accepts and the build compiles."""
    from kernels import support
    from kernels.flash_attention import api
    from orchestrator.kernel_tree.collect import package_dir
    from orchestrator.kernel_tree.own import own_kernel

    (flash,) = own_kernel("flash", None).kernels
    supports = flash.contract.supports
    dtypes = [str(dtype).removeprefix("torch.") for dtype in api.ACCEPTED_DTYPES]
    assert sorted(supports.dtypes) == sorted(dtypes)
    assert tuple(supports.head_dims) == tuple(api.SUPPORTED_HEAD_DIMS) == support.HEAD_DIMS
    assert supports.min_capability() == support.MIN_CAPABILITY
    assert supports.gqa and supports.causal and supports.devices == ["cuda"]
    entry = flash.contract.entry_module_files()[0]
    assert (package_dir("kernels").parent / entry).is_file()


@pytest.mark.parametrize("name", ["cpu-smoke", "default", "sensitivity", "fp8"])
def test_every_shipped_plan_passes_the_checks_on_a_gpu_target(name):
    from benches.plan import resolve_plan
    from orchestrator.kernel_tree.own import declaring_own_kernel

    plan = declaring_own_kernel(resolve_plan(name))
    assert targets.plan_problems(plan, has_gpu=True) == []
