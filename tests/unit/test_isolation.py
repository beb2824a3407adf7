"""Users' kernels in worker processes (benches/isolation.py, benches/worker.py), on the CPU
with real child processes: two versions of one package never meet; a kernel that crashes,
hangs or lies about its time fails that config alone, with one line, and everything else
of the run is still measured."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from benches import correctness, host_load, isolation, registry, runner
from benches.user_kernel import register
from benches.writers import StatusWriter, read_csv
from results_schema import AttentionConfig, CorrectnessRow, Measurement, Plan, SummaryRow
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel

pytestmark = pytest.mark.timeout(600)

RIGHT = """\
import torch.nn.functional as F

def right(q, k, v, causal, scale):
    return F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, scale=scale
    ).to(q.dtype)
"""


def kernel_tree(root: Path, folder: str, body: str, files: dict[str, str] | None = None) -> Path:
    """A package `pkg` whose pkg.ops:attention runs `body` (indented into the function)
    before answering right."""
    tree = root / folder
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    function = "def attention(q, k, v, *, causal, scale):\n" + textwrap.indent(body, "    ")
    ops = "import os, signal, time\n" + RIGHT + "\n" + function + "\n"
    (tree / "pkg" / "ops.py").write_text(ops + "    return right(q, k, v, causal, scale)\n")
    for name, text in (files or {}).items():
        (tree / "pkg" / name).write_text(text)
    return tree


def user_kernel(identity: str, folder: str, **contract) -> UserKernel:
    supports = {"devices": ["cpu"], "dtypes": ["float32"], **contract.pop("supports", {})}
    return UserKernel(
        identity=identity,
        directory=folder,
        contract=KernelContract(
            name=identity.split("@")[0], entry="pkg.ops:attention", supports=supports, **contract
        ),
        source=KernelIdentity(tree_sha256="0" * 64),
    )


def config(name: str, head_dim: int) -> AttentionConfig:
    return AttentionConfig(
        name=name, batch=1, heads=2, seq_len=33, head_dim=head_dim, dtype="float32", causal=True
    )


def cpu_plan(kernels: list[UserKernel], configs: list[AttentionConfig], samples=6) -> Plan:
    return Plan(
        name="isolation",
        description="worker processes on the CPU",
        device="cpu",
        candidate=kernels[0].identity,
        compared_with=[*(k.identity for k in kernels[1:]), "sdpa"],
        reference="reference",
        samples_per_config=samples,
        warmup_min=2,
        warmup_max=4,
        flush_l2=False,
        configs=configs,
        user_kernels=kernels,
    )


@pytest.fixture
def registered():
    """Registers a plan's kernels and, afterwards, ends their workers and forgets them."""
    plans: list[Plan] = []

    def add(plan: Plan, root: Path) -> Plan:
        register(plan, root)
        plans.append(plan)
        return plan

    yield add
    for plan in plans:
        for kernel in plan.user_kernels:
            impl = registry.IMPLEMENTATIONS.pop(kernel.identity, None)
            if getattr(impl, "worker", None) is not None:
                impl.worker.close()


def gate(plan: Plan) -> dict[tuple[str, str], CorrectnessRow]:
    device = torch.device(plan.device)
    rows = [
        row
        for index, c in enumerate(plan.configs)
        for row in correctness.check_config("r", c, plan, index, device)
    ]
    return {(r.config, r.implementation): r for r in rows}


@pytest.mark.slow
def test_two_versions_differing_in_a_constant_imported_at_call_time_are_told_apart(
    tmp_path, registered, monkeypatch
):
    """The module-juggling isolation this replaces could not keep these apart: each version
    imports pkg.constant only when called, by then the other's could be in sys.modules.
    Their inputs and outputs are buffers the parent lends (benches/shared_buffers.py), each
    freed once read."""
    body = "from pkg.constant import SCALE\nreturn right(q, k, v, causal, scale) * SCALE\n"
    kernel_tree(tmp_path, "one", body, {"constant.py": "SCALE = 1.0\n"})
    kernel_tree(tmp_path, "two", body, {"constant.py": "SCALE = 2.0\n"})
    kernels = [user_kernel("mine", "one"), user_kernel("mine@baseline", "two")]
    plan = registered(cpu_plan(kernels, [config("d8", 8)]), tmp_path)

    rows = gate(plan)
    assert rows[("d8", "mine")].passed, rows[("d8", "mine")].message
    baseline = rows[("d8", "mine@baseline")]
    assert not baseline.passed and baseline.message.startswith("max error")
    for identity in ("mine", "mine@baseline"):
        folder = registry.IMPLEMENTATIONS[identity].worker.lender._folder
        assert folder and not os.listdir(folder), identity


@pytest.mark.slow
def test_a_tree_whose_package_is_named_kernels_runs_with_its_env(tmp_path, registered):
    """Our kernel's package is `kernels`, and a user's may be too: the harness imports no
    package of that name, so the worker finds the tree's. The contract's env is set in the
    worker before the import, '{tree}' being the tree's path."""
    tree = tmp_path / "named"
    (tree / "kernels").mkdir(parents=True)
    (tree / "kernels" / "__init__.py").write_text("")
    body = (
        "import os\n"
        "assert os.environ['ATTN_HOME'] == os.path.dirname(os.path.dirname(__file__)) + '/x'\n"
    )
    (tree / "kernels" / "ops.py").write_text(
        RIGHT
        + "\ndef attention(q, k, v, *, causal, scale):\n"
        + textwrap.indent(body, "    ")
        + "    return right(q, k, v, causal, scale)\n"
    )
    kernel = user_kernel("named", "named", env={"ATTN_HOME": "{tree}/x"})
    kernel = kernel.model_copy(
        update={"contract": kernel.contract.model_copy(update={"entry": "kernels.ops:attention"})}
    )
    plan = registered(cpu_plan([kernel], [config("d8", 8)]), tmp_path)
    row = gate(plan)[("d8", "named")]
    assert row.passed, row.message


@pytest.mark.slow
def test_a_kernel_that_segfaults_fails_that_config_only(tmp_path, registered):
    body = "if q.shape[-1] == 16:\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    kernel_tree(tmp_path, "crashy", body)
    plan = cpu_plan([user_kernel("crashy", "crashy")], [config("d16", 16), config("d8", 8)])
    registered(plan, tmp_path)

    rows = gate(plan)
    assert not rows[("d16", "crashy")].passed
    assert rows[("d16", "crashy")].message == "crashed: killed by SIGSEGV during 'gate'"
    assert rows[("d8", "crashy")].passed  # a fresh worker took the next config
    assert all(rows[(c, "sdpa")].passed for c in ("d16", "d8"))


@pytest.mark.slow
@pytest.mark.long  # waits out its 30 s call timeout
def test_a_kernel_that_hangs_is_stopped_by_its_call_timeout(tmp_path, registered):
    body = "if q.shape[-1] == 16:\n    time.sleep(3600)\n"
    kernel_tree(tmp_path, "stuck", body)
    # The bound is what the healthy config's requests must also meet: generous enough for
    # a loaded 2-core machine (each request on these tiny inputs takes milliseconds).
    kernel = user_kernel("stuck", "stuck", call_timeout="30s")
    plan = registered(cpu_plan([kernel], [config("d16", 16), config("d8", 8)]), tmp_path)

    rows = gate(plan)
    assert rows[("d16", "stuck")].message == "hung: no answer to 'gate' in 30 s (call_timeout)"
    assert rows[("d8", "stuck")].passed


@pytest.mark.slow
def test_a_supports_check_of_the_kernels_own_says_what_it_refuses(tmp_path, registered):
    checks = (
        "def refuse_d16(config):\n"
        "    return 'no tiles for 16' if config.head_dim == 16 else None\n"
        "def broken(config):\n"
        "    raise KeyError('head_dim')\n"
    )
    kernel_tree(tmp_path, "picky", "", {"checks.py": checks})
    kernel_tree(tmp_path, "broken", "", {"checks.py": checks})
    kernels = [
        user_kernel("picky", "picky", supports={"check": "pkg.checks:refuse_d16"}),
        user_kernel("broken", "broken", supports={"check": "pkg.checks:broken"}),
    ]
    plan = registered(cpu_plan(kernels, [config("d16", 16), config("d8", 8)]), tmp_path)

    rows = gate(plan)
    assert rows[("d16", "picky")].message == "unsupported: no tiles for 16"
    assert rows[("d8", "picky")].passed
    assert rows[("d8", "broken")].message == (
        "unsupported: its supports check raised KeyError: 'head_dim'"
    )


def run_whole(plan: Plan, run_dir: Path, between=lambda: None) -> tuple[list, list]:
    with runner.StopRequested() as stop:
        ctx = runner.RunContext(
            plan, run_dir, "r", StatusWriter(run_dir / "status.json", "r"), stop
        )
        gate_rows = runner.run_correctness(ctx)
        between()
        environment = runner.load_or_write_environment(run_dir)
        runner.run_benchmark(ctx, gate_rows, None, environment)
    results = run_dir / "results"
    return read_csv(results / "timed_checks.csv", CorrectnessRow), read_csv(
        results / "summary.csv", SummaryRow
    )


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ("os.kill(os.getpid(), signal.SIGSEGV)", "timing: crashed: killed by SIGSEGV"),
        ("raise MemoryError('out of memory')", "timing: raised while timed: MemoryError"),
    ],
    ids=["segfault", "raises"],
)
@pytest.mark.slow
def test_a_failure_while_timed_costs_that_config_and_the_run_goes_on(
    tmp_path, registered, failure, reason
):
    """The kernel passes the gate, then fails once timing starts on one config: that
    config's samples of it are no result, the other config and SDPA are measured."""
    marker = tmp_path / "timing-started"
    body = f"if q.shape[-1] == 16 and os.path.exists({str(marker)!r}):\n    {failure}\n"
    kernel_tree(tmp_path, "late", body)
    plan = cpu_plan([user_kernel("late", "late")], [config("d16", 16), config("d8", 8)])
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run", between=marker.touch)
    lost = [r for r in checks if r.stage == "timing"]
    assert [(r.config, r.implementation) for r in lost] == [("d16", "late")]
    assert lost[0].message.startswith(reason), lost[0].message
    rows = {(r.config, r.implementation): r for r in summary}
    assert rows[("d8", "late")].n == plan.samples_per_config and rows[("d8", "late")].flag is None
    assert rows[("d16", "sdpa")].n == plan.samples_per_config


@pytest.mark.slow
def test_a_worker_whose_clock_lies_changes_only_its_own_report_and_fails_for_it(
    tmp_path, registered
):
    """The harness times a worker's calls with its own clock (benches/bracket.py): a kernel
    that rewrites the harness's clock in its own process moves no sample, and its process's
    report, longer than the harness's whole bracket of the call, fails the row naming both
    (the report too short is the cheat suite's timer_patch)."""
    lying = (
        "from benches import timing\ntiming.CpuClock.time_call = lambda self, fn: (fn(), 1e6)[1]\n"
    )
    kernel_tree(tmp_path, "liar", "", {"__init__.py": lying})
    plan = registered(cpu_plan([user_kernel("liar", "liar")], [config("d8", 8)]), tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    (lost,) = [r for r in checks if r.stage == "timing"]
    reported = re.match(
        r"timing: its process reported ([\d.e+]+) ms a call, "
        r"more than the harness's whole bracket of ([\d.e+-]+) ms",
        lost.message,
    )
    assert reported, lost.message
    assert float(reported[1]) > 1000 * float(reported[2])  # 1e6 ms a sample, each of its calls
    assert all(r.implementation != "liar" or r.flag for r in summary)


@pytest.mark.slow
def test_a_refused_config_leaves_nothing_of_its_placement_in_the_worker(tmp_path, registered):
    """A worker refused on one config mid-timing (its clock divided by 20 there: the
    harness names the lie once five samples have both figures) but still alive times the
    next: the refused placement was dropped there, as at a block's end. Left in the worker,
    its lent buffers stayed mapped after the harness let them go (on the GPU the parent
    freed them, and the next placement's open of those addresses failed:
    CUDA_ERROR_ALREADY_MAPPED, an FP8 kernel on an H200, 2026-11-29)."""
    slow = (
        "from benches import timing\n"
        "LIE = [False]\n"
        "_time_call = timing.CpuClock.time_call\n"
        "timing.CpuClock.time_call = lambda self, fn: (lambda ms: ms / 20 if LIE[0] else ms)(\n"
        "    _time_call(self, fn)\n"
        ")\n"
    )
    log = tmp_path / "mapped.log"  # each call: its head dim, the lent files its process maps
    body = (
        "import pkg\n"
        "pkg.LIE[0] = q.shape[-1] == 8\n"
        "time.sleep(0.002)\n"
        "with open('/proc/self/maps') as maps:\n"
        "    lent = sorted({line.split()[-1] for line in maps if 'bench-lent' in line})\n"
        f"with open({str(log)!r}, 'a') as out:\n"
        "    out.write(repr((q.shape[-1], lent)) + chr(10))\n"
    )
    kernel_tree(tmp_path, "slow", body, {"__init__.py": slow})
    plan = cpu_plan([user_kernel("slow", "slow")], [config("d8", 8), config("d16", 16)])
    plan = plan.model_copy(update={"placements": 3, "warmup_min": 1, "warmup_max": 2})
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    lost = {r.config: r.message for r in checks if r.stage == "timing" and not r.passed}
    assert list(lost) == ["d8"] and "where the harness measured" in lost["d8"], lost
    calls = [ast.literal_eval(line) for line in log.read_text().splitlines()]
    mapped_for_d8 = {path for dim, paths in calls if dim == 8 for path in paths}
    still = mapped_for_d8 & set([paths for dim, paths in calls if dim == 16][-1])
    assert mapped_for_d8 and not still, sorted(still)
    rows = {(r.config, r.implementation): r for r in summary}
    assert rows[("d16", "slow")].n == plan.samples_per_config


@pytest.mark.slow
def test_a_worker_whose_clock_runs_slow_is_named_over_a_configs_placements(tmp_path, registered):
    """A clock divided by 20 around calls 2 ms long: the report is a lie the harness names
    once a config has five samples with both figures, counted across its placements (here
    three of two samples each, after a warm-up of one or two)."""
    slow = (
        "from benches import timing\n"
        "_time_call = timing.CpuClock.time_call\n"
        "timing.CpuClock.time_call = lambda self, fn: _time_call(self, fn) / 20\n"
    )
    kernel_tree(tmp_path, "slow", "time.sleep(0.002)\n", {"__init__.py": slow})
    plan = cpu_plan([user_kernel("slow", "slow")], [config("d8", 8)]).model_copy(
        update={"placements": 3, "warmup_min": 1, "warmup_max": 2}
    )
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    (lost,) = [r for r in checks if r.stage == "timing"]
    assert lost.message.startswith("timing: its process reported "), lost.message
    assert "where the harness measured" in lost.message
    assert all(r.implementation != "slow" or r.flag for r in summary)


@pytest.mark.skipif(
    host_load.own_thread_wait_ns() is None or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux's schedstat and two cores",
)
def test_an_honest_report_on_a_loaded_host_is_not_called_a_lie(tmp_path, registered, monkeypatch):
    """The parent made to wait for a core after each wake-up (its thread in SCHED_IDLE on one
    core with a process busy 4 ms in 5, sched(7)), the worker free on the others: the
    harness's fastest bracket then reads several times the worker's honest report, which
    the CPU's rule called a lie ("its process reported 2.094 ms ... at least 13.5 ms", an
    honest row of the CI gate's test on a loaded 2-core machine). Less the time the parent
    and the worker sat runnable but not running, it is the call. A guard more than a
    reproduction: the rule without that correction failed it in 1 of 6 runs (2 of 2 with a
    process busy all the time, which made the run take minutes); tests/unit/test_host_load.py
    holds the measurement itself."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    kernel_tree(tmp_path, "fine", "")
    small = AttentionConfig(
        name="b1h2s128", batch=1, heads=2, seq_len=128, head_dim=64, dtype="float32", causal=False
    )
    plan = registered(cpu_plan([user_kernel("fine", "fine")], [small], samples=8), tmp_path)
    core = min(os.sched_getaffinity(0))
    # Busy 4 ms, idle 1 ms: the parent runs in the gaps, each wake-up waiting up to 4 ms.
    spin = (
        "import time\nend = time.time() + 600\nwhile time.time() < end:\n"
        "    t = time.time() + 0.004\n    while time.time() < t: pass\n    time.sleep(0.001)\n"
    )
    hog = subprocess.Popen([sys.executable, "-c", spin])
    os.sched_setaffinity(hog.pid, {core})
    affinity, policy = os.sched_getaffinity(0), os.sched_getscheduler(0)

    def crowd_the_parent() -> None:  # after the gate: the workers started unpinned
        os.sched_setaffinity(0, {core})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    try:
        checks, summary = run_whole(plan, tmp_path / "run", between=crowd_the_parent)
    finally:
        os.sched_setscheduler(0, policy, os.sched_param(0))
        os.sched_setaffinity(0, affinity)
        hog.kill()
        hog.wait()
    assert [r.message for r in checks if not r.passed] == []
    (fine,) = [r for r in summary if r.implementation == "fine"]
    assert fine.n == plan.samples_per_config


def test_a_calibration_taken_in_a_loaded_spell_is_taken_again_not_held_against_the_kernel(
    tmp_path, registered, monkeypatch
):
    """What a bracket adds, measured while the machine stalled (every bracket of the first
    calibration 50 ms longer), would leave an honest call no time at all: the harness
    measures it again and times the call, where it refused the kernel before ("its calls
    took no time by the harness's clock"; an honest kernel was, two suites at once on 2
    cores)."""
    measured = runner.WorkerTiming._calibration_samples
    stalled = []

    def first_stalled(self, *args):
        known = measured(self, *args)
        if not stalled:
            stalled.append(True)
            known = known._replace(bracketed=[ms + 50.0 for ms in known.bracketed])
        return known

    monkeypatch.setattr(runner.WorkerTiming, "_calibration_samples", first_stalled)
    kernel_tree(tmp_path, "fine", "")
    plan = registered(cpu_plan([user_kernel("fine", "fine")], [config("d8", 8)]), tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    assert stalled
    assert [r.message for r in checks if r.stage == "timing" and not r.passed] == []
    (fine,) = [r for r in summary if r.implementation == "fine"]
    assert fine.n == plan.samples_per_config and fine.median_ms > 0


def test_the_calibration_places_its_known_call_once_a_config_not_once_a_block(
    tmp_path, registered, monkeypatch
):
    """The calibration (at each block's start on the GPU, the bracket's cost drifting
    between blocks; between each round's samples on the CPU) uses the known call's placement
    kept from the config's first use: a fresh placement and its warm-up
    a block held 40-137 ms of each block's first sample on an H200 (10.8 s of a default
    run). Two configs of three blocks each: one calibration placement per config and way
    of timing it, dropped before the next config's, every block still calibrated."""
    placed, dropped, calibrated = [], [], []

    class Counted(isolation.MeasuredPlacement):
        def __init__(self, remote, config, inputs, mode, calls, *args):
            super().__init__(remote, config, inputs, mode, calls, *args)
            if remote.name == "bench-calibration":
                key = (config.name, mode, args[-1])  # and the lent query buffers
                placed.append(key)
                self.drop = lambda drop=self.drop: (dropped.append(key), drop())

    measured = runner.WorkerTiming._calibration_samples

    def counted(self, config, *args):
        calibrated.append(config.name)
        return measured(self, config, *args)

    monkeypatch.setattr(isolation, "MeasuredPlacement", Counted)
    monkeypatch.setattr(runner.WorkerTiming, "_calibration_samples", counted)
    kernel_tree(tmp_path, "fine", "")
    plan = cpu_plan([user_kernel("fine", "fine")], [config("a", 8), config("b", 16)], samples=6)
    plan = registered(plan.model_copy(update={"placements": 3}), tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    assert [r.message for r in checks if not r.passed] == []
    assert len(placed) == len(set(placed)) and sorted(dropped) == sorted(placed)
    assert {key[0] for key in placed} == {"a", "b"}
    # config a's placements dropped before b's were made
    assert [key[0] for key in dropped] == sorted(key[0] for key in dropped)
    assert calibrated.count("a") >= 3 and calibrated.count("b") >= 3  # every block's own


def test_a_workers_batch_is_sized_by_its_fastest_warm_call_not_its_cold_ones(tmp_path, registered):
    """A warm-up of a few calls is mostly cold ones: sized by their median, a call of well
    under a millisecond was timed one a sample, each carrying the pipe's milliseconds
    (2.9 ms read for SDPA's 0.1 ms, issue 49 item 4). Two calls in three sleep 10 ms here,
    as cold calls would; the batch follows the warm ones all the same."""
    body = (
        "import itertools\n"
        "global _calls\n"
        "_calls = globals().get('_calls') or itertools.count()\n"
        "if next(_calls) % 3:\n"
        "    time.sleep(0.01)\n"
    )
    kernel_tree(tmp_path, "cold", body)
    plan = registered(cpu_plan([user_kernel("cold", "cold")], [config("d8", 8)]), tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    assert [r.message for r in checks if r.stage == "timing" and not r.passed] == []
    rows = read_csv(tmp_path / "run" / "results" / "measurements.csv", Measurement)
    cold = [r for r in rows if r.implementation == "cold"]
    assert cold and {r.mode for r in cold} == {"batch"} and min(r.calls for r in cold) > 1


def _gpu_rule_placement(brackets: list[tuple[float, float]]):
    """A placement judged by the GPU's rule (single launches, 1 call a sample) whose
    bracketed calls read `brackets` in turn: (the harness's figure, the worker's own)."""
    from types import SimpleNamespace

    placement = isolation.MeasuredPlacement.__new__(isolation.MeasuredPlacement)
    recalibrated = []
    placement._figures = isolation._Figures()
    placement._measuring = isolation.Measuring(
        bracket=SimpleNamespace(looked_again=0),
        overhead_ms=lambda gated: 0.0,
        tolerance=0.01,
        secret=1,
        recalibrate=recalibrated.append,
    )
    placement._worker = SimpleNamespace(device=torch.device("cuda"), gated=lambda: False)
    placement.mode, placement.calls, placement.reported = "single", 1, None
    taken = iter(brackets)

    def take():
        harness, own = next(taken)
        return harness + 0.01, harness, own, harness  # whole, harness, own, unloaded

    placement._take = take
    return placement, recalibrated


def test_a_gpu_sample_is_the_workers_own_time_less_what_its_process_adds_within_a_bound():
    """On the GPU a worker's own events read a call longer than the parent's events read it
    in the parent's process (the GPU's switch to the worker's context: +0.8-1.1 % at 0.22 ms,
    issue 49 item 4; brackets.OWN_OFFSET_WINDOW). What a sample has taken off is the known
    call's own time in the harness's worker less its time in the parent: medians over the
    calibrations so far, never below 0, at most OWN_OFFSET_MAX_FRACTION of the call, and
    none in graph mode, where a replay's calls share the switch."""
    from types import SimpleNamespace

    from benches import bracket as brackets

    class Bracket:
        interleaves = False
        overhead_of = staticmethod(brackets.CudaBracket.overhead_of)

    def known(own: float, count: int = 9) -> brackets.KnownSamples:
        return brackets.KnownSamples([0.6] * count, [0.2] * 9, [own] * count)

    taken = iter([known(0.2017), known(0.2023, 3), known(0.2023, 3), known(0.25), known(0.19)])
    calibration = brackets.Calibration(Bracket(), lambda *args: next(taken))
    first, capped, faster = (SimpleNamespace(name=name) for name in ("a", "b", "c"))
    assert calibration.own_offset_ms(first, "single", 1, False) == pytest.approx(0.0017)
    for _ in range(2):  # two more blocks, read longer: the window's median holds
        calibration.forget()
        assert calibration.own_offset_ms(first, "single", 1, False) == pytest.approx(0.0017)
    assert calibration.own_offset_ms(capped, "single", 1, False) == pytest.approx(
        brackets.OWN_OFFSET_MAX_FRACTION * 0.2
    )
    assert calibration.own_offset_ms(faster, "single", 1, False) == 0.0
    assert calibration.own_offset_ms(first, "graph", 64, False) == 0.0  # and nothing measured

    placement, _ = _gpu_rule_placement([(0.30, 0.25)])
    placement._measuring.own_offset_ms = lambda gated: 0.002
    assert placement.sample() == pytest.approx(0.248)
    assert placement.reported == 0.25  # the worker's own word, kept as it came


def test_a_gpu_report_under_the_harness_is_judged_again_before_it_is_refused():
    """On the GPU the rule takes a second look before a refusal: its first five samples'
    brackets may hold other work (an honest kernel of the cheat suite read 1.5-6x its own
    events there, refused in 5 of 11 GPU runs). Fresh brackets judged alone clear an
    honest kernel; a kernel that lies is refused at the second look."""
    disturbed, honest = (1.0, 0.5), (0.505, 0.5)
    placement, recalibrated = _gpu_rule_placement([honest] * 5)
    for harness, own in [disturbed] * 5:
        placement._compare(harness, own, harness)
    assert recalibrated == [False]  # measured afresh for the second look
    assert placement._figures.own == [0.5] * 5 and placement._figures.looked_again
    assert placement._measuring.bracket.looked_again == 1  # what the run's log counts

    liar, _ = _gpu_rule_placement([disturbed] * 5)
    with pytest.raises(
        isolation.Refused, match=r"; 5 fresh samples after a first look read the same\)"
    ):
        for harness, own in [disturbed] * 5:
            liar._compare(harness, own, harness)


@pytest.mark.slow
def test_a_warm_call_runs_the_workers_kernel_with_no_bracket_and_no_check(tmp_path, registered):
    """A block's warm rounds (runner._Block.settle) become no sample: a worker's warm call
    is the kernel's call alone, unbracketed and unchecked (each of our kernel's cost its
    block 4-9 ms bracketed and checked, issue 48 item 6), and no calibration is taken for
    it."""
    calls = tmp_path / "calls"
    kernel_tree(tmp_path, "fine", f"open({str(calls)!r}, 'a').write('x')\n")
    plan = registered(cpu_plan([user_kernel("fine", "fine")], [config("d8", 8)]), tmp_path)
    cfg = plan.configs[0]
    inputs = correctness.make_inputs(cfg, torch.device("cpu"), 3)
    calibrated = []

    class NoBracket:
        def sample(self, *args, **kwargs):
            raise AssertionError("a warm call was bracketed")

    measuring = isolation.Measuring(NoBracket(), calibrated.append, 0.01, secret=1)
    held = registry.get("fine").place(cfg, inputs, "single", 1, 5, measuring)
    try:
        held.warm()
        held.warm()
        assert calls.read_text() == "xx"
        assert held.checked() == (0, None)  # no sample taken, none checked
        assert calibrated == []
    finally:
        held.drop()


def test_a_blocks_warm_rounds_warm_a_workers_placement_and_sample_it_last():
    """The warm rounds before a block's samples: a worker's placement by its untimed warm
    calls, then one sample (a bracket taken before the timed rounds' first); the parent's
    own (no `warm`) by samples, as its timed rounds take them."""
    import numpy as np

    from benches import placement

    done: dict[str, list[str]] = {"kernel": [], "sdpa": []}

    class Worker:
        def warm(self):
            done["kernel"].append("warm")

        def sample(self):
            done["kernel"].append("sample")
            return 1.0

    class Parents:
        def sample(self):
            done["sdpa"].append("sample")
            return 1.0

    block = runner._Block.__new__(runner._Block)
    block.placements = {"kernel": Worker(), "sdpa": Parents()}
    block._rng = np.random.default_rng(0)
    block.settle(0.0)
    assert done["kernel"] == ["warm"] * (placement.WARM_ROUNDS - 1) + ["sample"]
    assert done["sdpa"] == ["sample"] * placement.WARM_ROUNDS


def test_a_blocks_samples_are_checked_in_one_batch_and_a_wrong_one_is_named(
    tmp_path, registered, monkeypatch
):
    """Each worker sample's rows are read inside its bracket, but referenced and compared
    later, many samples at once (row_checks.Unchecked: a check a sample held the host 0.6 ms
    of each on an H200, issue 48 item 6): no reference while the block samples; at `confirm`,
    one for all of them, refusing the kernel by the first sample whose rows were wrong."""
    from benches import bracket, row_checks

    calls = tmp_path / "calls"
    body = (
        f"seen = len(open({str(calls)!r}).read()) if os.path.exists({str(calls)!r}) else 0\n"
        f"open({str(calls)!r}, 'a').write('x')\n"
        "if seen == 4:\n    return q * 0 + 7\n"
    )
    kernel_tree(tmp_path, "fifth", body)
    plan = registered(cpu_plan([user_kernel("fifth", "fifth")], [config("d8", 8)]), tmp_path)
    cfg = plan.configs[0]
    inputs = correctness.make_inputs(cfg, torch.device("cpu"), 3)
    referenced = []
    reference = row_checks.reference

    def counted(q_rows, *args, **kwargs):
        referenced.append(len(q_rows))
        return reference(q_rows, *args, **kwargs)

    monkeypatch.setattr(row_checks, "reference", counted)
    measuring = isolation.Measuring(bracket.CpuBracket(), lambda gated: 0.0, 1e-3, secret=1)
    held = registry.get("fifth").place(cfg, inputs, "single", 1, 5, measuring)
    try:
        for _ in range(8):
            held.sample()
        assert referenced == []  # read, not yet checked
        with pytest.raises(isolation.Refused, match=r"^sample 5: max error .* in the rows checked"):
            held.confirm()
        assert referenced == [8 * row_checks.ROWS_PER_PICK]  # the 8 samples' rows at once
    finally:
        held.drop()


def test_a_refusal_while_timed_names_a_wrong_row_read_before_it():
    """Rows are checked a batch at a time (MeasuredPlacement.confirm); a kernel that answers
    garbage at once also takes no time, or lies: refused for that first, it would be named
    for its time where its rows were wrong (the GPU cheat suite's garbage-while-timed and
    lazy-output, H200, 2026-11-30). The rows read before the refusal are checked first."""
    from types import SimpleNamespace

    from benches import row_checks

    placement, _ = _gpu_rule_placement([(0.05, 0.0)] * (isolation.NONPOSITIVE_RETAKES + 1))
    wrong = row_checks.PickVerdict(3, 0, "max error 5 over tolerance 0.01 in the rows checked", 5.0)
    # one kept pick, sample 3's, whose rows were wrong (a class: len() reads the type's)
    placement._unchecked = type(
        "Kept", (), {"__len__": lambda self: 1, "verdicts": lambda self, *a: [wrong]}
    )()
    placement._k = placement._v = None
    placement._fresh, placement._scales = [torch.empty(1, 2, 3, 4)], None
    placement._config = SimpleNamespace(causal=False)
    placement._modified_input = lambda: None
    placement.worst_error = None
    with pytest.raises(isolation.Refused, match=r"^sample 3: max error 5 over tolerance"):
        placement.sample()
