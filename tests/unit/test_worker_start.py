"""Workers started before the parent imports torch and forked from a server that imported
it once (benches/worker_start.py), and the collector kept off what outlives the timing loop
(benches/runner.py): the first result's time, with nothing of what is checked or measured
left out."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest
import torch

from benches import correctness, registry, runner, worker_start
from benches.user_kernel import register
from benches.writers import StatusWriter
from results_schema import AttentionConfig, Plan
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(600)

OPS = """\
import torch.nn.functional as F

def attention(q, k, v, *, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
"""


def kernel(root: Path, identity: str, folder: str, ops: str = OPS) -> UserKernel:
    (root / folder / "pkg").mkdir(parents=True)
    (root / folder / "pkg" / "__init__.py").write_text("")
    (root / folder / "pkg" / "ops.py").write_text(ops)
    return UserKernel(
        identity=identity,
        directory=folder,
        contract=KernelContract(
            name=identity.split("@")[0],
            entry="pkg.ops:attention",
            supports={"devices": ["cpu"], "dtypes": ["float32"]},
        ),
        source=KernelIdentity(tree_sha256="0" * 64),
    )


def plan_of(kernels: list[UserKernel]) -> Plan:
    return Plan(
        name="prestart",
        description="workers started early, on the CPU",
        device="cpu",
        candidate=kernels[0].identity,
        compared_with=[*(k.identity for k in kernels[1:]), "sdpa"],
        reference="reference",
        samples_per_config=4,
        warmup_min=2,
        warmup_max=4,
        flush_l2=False,
        configs=[
            AttentionConfig(
                name="d8", batch=1, heads=2, seq_len=33, head_dim=8, dtype="float32", causal=True
            )
        ],
        user_kernels=kernels,
    )


@pytest.fixture
def cleanup():
    plans: list[Plan] = []
    yield plans.append
    for plan in plans:
        for k in plan.user_kernels:
            impl = registry.IMPLEMENTATIONS.pop(k.identity, None)
            if getattr(impl, "worker", None) is not None:
                impl.worker.close()
    for starting in worker_start._started.values():
        process, conn = starting.result()
        process.kill()
        process.join(timeout=10)
        conn.close()
    worker_start._started.clear()


@pytest.mark.slow
def test_the_gate_adopts_the_workers_started_before_it_and_skips_failed_builds(tmp_path, cleanup):
    mine, base, other = (
        kernel(tmp_path, "mine", "one"),
        kernel(tmp_path, "broken", "two"),
        kernel(tmp_path, "other", "three"),
    )
    (tmp_path / "two.build-failed").write_text("nvcc: error\n")
    plan = plan_of([mine, base, other])
    cleanup(plan)

    # `other` is not among the identities run (a repro's --implementation), `two` failed
    # its build: only `one` gets a worker now.
    assert worker_start.prestart(plan, ["mine", "broken", "sdpa"], tmp_path) == 1
    ((process, _),) = [starting.result() for starting in worker_start._started.values()]
    register(plan, tmp_path)
    rows = correctness.check_config("r", plan.configs[0], plan, 0, torch.device("cpu"))
    by_name = {r.implementation: r for r in rows}
    assert by_name["mine"].passed, by_name["mine"].message
    assert by_name["broken"].message == "build failed: nvcc: error"
    assert registry.get("mine").worker._process is process  # adopted, not started again
    assert not worker_start._started

    # A second worker for the same tree (a restart after a loss) is a fresh process.
    registry.get("mine").worker.close()
    again = correctness.check_config("r", plan.configs[0], plan, 0, torch.device("cpu"))
    assert {r.implementation: r for r in again}["mine"].passed
    assert registry.get("mine").worker._process.pid != process.pid


@pytest.mark.slow
def test_what_outlives_the_timing_loop_is_frozen_out_of_collections_during_it(
    tmp_path, cleanup, monkeypatch
):
    plan = plan_of([kernel(tmp_path, "mine", "one")])
    cleanup(plan)
    register(plan, tmp_path)
    frozen_during = []
    prepare = runner.prepare_config

    def noting(*args):
        frozen_during.append(gc.get_freeze_count())
        return prepare(*args)

    monkeypatch.setattr(runner, "prepare_config", noting)
    with runner.StopRequested() as stop:
        ctx = runner.RunContext(plan, tmp_path / "run", "r", StatusWriter(None, "r"), stop)
        gate = runner.run_correctness(ctx)
        environment = runner.load_or_write_environment(ctx.run_dir)
        measurements, _ = runner.run_benchmark(ctx, gate, None, environment)
    assert len(measurements) == 4 * len(plan.identities)
    assert frozen_during and frozen_during[0] > 1000  # torch's objects, at least
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # as it was, afterwards


# A kernel that answers only where it runs as a fresh interpreter started now would: in the
# parent's folder and environment of this moment, and with none of the parent's torch state.
CHECKS_WHERE_IT_RUNS = """\
import os
import torch
import torch.nn.functional as F

def attention(q, k, v, *, causal, scale):
    seen = (os.getcwd(), os.environ.get("WORKER_START_MARK"), hasattr(torch, "_parent_mark"))
    if seen != ({folder!r}, "set after the server started", False):
        raise RuntimeError(f"the worker runs with {{seen}}")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
"""


@pytest.mark.slow
def test_a_worker_takes_the_parents_folder_and_environment_at_its_start_and_no_torch_state(
    tmp_path, cleanup, monkeypatch
):
    """The fork server started with the first worker keeps the folder and environment the
    parent had then; a later worker still runs with the parent's as they are at its start,
    and never with what the parent's own torch holds (a fork of the parent would: a CUDA
    context, on a GPU)."""
    first = plan_of([kernel(tmp_path, "first", "one")])
    cleanup(first)
    register(first, tmp_path)
    device = torch.device("cpu")
    rows = correctness.check_config("r", first.configs[0], first, 0, device)
    assert {r.implementation: r for r in rows}["first"].passed

    later = tmp_path / "later"
    later.mkdir()
    monkeypatch.chdir(later)
    monkeypatch.setenv("WORKER_START_MARK", "set after the server started")
    monkeypatch.setattr(torch, "_parent_mark", True, raising=False)
    ops = CHECKS_WHERE_IT_RUNS.format(folder=os.path.realpath(later))
    second = plan_of([kernel(tmp_path, "second", "two", ops)])
    cleanup(second)
    register(second, tmp_path)
    rows = correctness.check_config("r", second.configs[0], second, 0, device)
    row = {r.implementation: r for r in rows}["second"]
    assert row.passed, row.message


@pytest.mark.slow
def test_the_fork_servers_preload_imports_torch_and_numpy_frozen():
    """multiprocessing's fork server skips a preload name that does not import, silently:
    every worker would then import torch itself. In a fresh interpreter, as the server
    does it: each name imports, and torch and numpy are imported with what they made frozen
    (torch alone leaves ~100,000 objects a collection would walk)."""
    import subprocess
    import sys

    preload = (
        "import gc, importlib, json, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps([sorted({'torch', 'numpy'} & set(sys.modules)), gc.get_freeze_count()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", preload, *worker_start.SERVER_PRELOAD],
        capture_output=True,
        text=True,
        cwd=Path(worker_start.__file__).parents[1],
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    imported, frozen = json.loads(done.stdout)
    assert imported == ["numpy", "torch"] and frozen > 100_000


def test_imports_for_good_run_without_the_collector_and_end_frozen():
    from benches.long_lived import imported_for_good

    kept = []  # alive to the end: a frozen object freed leaves the frozen count
    for enabled_before in (True, False):
        (gc.enable if enabled_before else gc.disable)()
        frozen = gc.get_freeze_count()
        try:
            with imported_for_good():
                assert not gc.isenabled()
                kept.append([[] for _ in range(1000)])
            assert gc.isenabled() == enabled_before
            assert gc.get_freeze_count() >= frozen + 1000
        finally:
            gc.enable()
