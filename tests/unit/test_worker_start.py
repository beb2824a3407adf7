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


# A harness's first steps on the CPU, in a process of its own (one thread, as the harness
# has then): a file opened, the workers prestarted, then the folder, the environment and
# torch changed as the run goes on; a later worker must see the first two and not the third.
HARNESS_ON_THE_CPU = """
import json, os, sys
from pathlib import Path
from multiprocessing import forkserver
from benches import correctness, worker_start
from benches.user_kernel import register
from tests.unit.test_worker_start import CHECKS_WHERE_IT_RUNS, kernel, plan_of

root, later = Path(sys.argv[1]), Path(sys.argv[2])
held = os.open(root / "harness-file", os.O_CREAT | os.O_RDONLY)  # never its server's
first = plan_of([kernel(root, "first", "one")])
assert worker_start.prestart(first, ["first"], root) == 1
((process, _),) = [starting.result() for starting in worker_start._started.values()]
server = forkserver._forkserver._forkserver_pid

def parent(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

import torch
os.chdir(later)
os.environ["WORKER_START_MARK"] = "set after the server started"
torch._parent_mark = True
ops = CHECKS_WHERE_IT_RUNS.format(folder=os.path.realpath(later))
second = plan_of([kernel(root, "second", "two", ops)])
register(second, root)
rows = correctness.check_config("r", second.configs[0], second, 0, torch.device("cpu"))
print(json.dumps({
    "forked": parent(server) == os.getpid()
    and Path(f"/proc/{server}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes(),
    "server_files": {
        fd: os.readlink(f"/proc/{server}/fd/{fd}") for fd in os.listdir(f"/proc/{server}/fd")
    },
    "held": os.readlink(f"/proc/self/fd/{held}"),
    "workers_of_the_server": parent(process.pid) == server,
    "second": [(r.passed, r.message) for r in rows if r.implementation == "second"],
}))
"""


@pytest.mark.slow
def test_on_the_cpu_the_server_is_the_harness_forked_before_the_run(tmp_path):
    """On the CPU the workers' server is no interpreter of its own importing torch again:
    a fork of the harness made at prestart, holding none of the harness's files but the two
    a started server holds (and 0-2), whose workers, started then or later, run in the
    harness's folder and environment of their start and with none of its later torch."""
    import subprocess
    import sys

    later = tmp_path / "later"
    later.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", HARNESS_ON_THE_CPU, str(tmp_path), str(later)],
        capture_output=True,
        text=True,
        cwd=Path(worker_start.__file__).parents[1],
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["forked"] and seen["workers_of_the_server"]
    assert seen["held"] == str(tmp_path / "harness-file")
    files = {int(fd): name for fd, name in seen["server_files"].items()}
    assert {0, 1, 2} <= set(files)
    # Past 0-2, a started server's alone: its socket and pipes, its selector, and the
    # null device multiprocessing opens for its standard input; no file of the harness's.
    kinds = ("socket:", "pipe:", "anon_inode:", os.devnull)
    assert all(name.startswith(kinds) for fd, name in files.items() if fd > 2), files
    assert seen["second"] == [[True, seen["second"][0][1]]], seen["second"]


def test_a_process_running_threads_starts_its_server_instead():
    """A fork would copy a process in the middle of its other threads' work."""
    import subprocess
    import sys

    running = (
        "import threading, time\n"
        "from multiprocessing import forkserver\n"
        "from benches import worker_start\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print(worker_start.serve_forks_from_here(), forkserver._forkserver._forkserver_pid)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", running],
        capture_output=True,
        text=True,
        cwd=Path(worker_start.__file__).parents[1],
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None"]


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
