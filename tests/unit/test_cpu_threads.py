"""One intra-op thread setting for the harness and its workers on the CPU (benches/cpu_threads.py,
issue 49 item 4): a user kernel timed through its worker agrees with the same call timed in
the harness's process, and the run records the setting; on CUDA nothing is changed."""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch

from benches import cpu_threads, host_load, runner
from benches.writers import StatusWriter, read_csv
from results_schema import AttentionConfig, EnvironmentFingerprint, Measurement
from tests.unit.test_isolation import (  # noqa: F401 (registered: a fixture)
    cpu_plan,
    kernel_tree,
    registered,
    run_whole,
    user_kernel,
)

pytestmark = pytest.mark.timeout(900)

# SDPA in float32 as the registry's (the worker's kernel is the same call), 2.3-10 ms a call
# on a 2-core machine with one thread. A worker's call under 2 ms is timed in batches
# (timing.batch_calls_for), the harness's own one call a sample: batched, 1x4x256 (0.7 ms)
# read 0.69 of the parent with the worker's own clock agreeing (0.70), back-to-back calls
# on one input being faster than calls between other work; not this fix's to hold, so the
# comparison takes the configs timed one call a sample on both sides.
SHAPES = [(1, 4, 512), (1, 8, 512), (2, 8, 512)]
AGREEMENT = 0.05  # issue 49 item 4: within 5 % on the CPU
# Samples a config, over as many blocks of fresh placements (where its buffers lie): on one
# placement of 30 samples the same SDPA's medians in two processes sat up to 10 % apart by
# the worker's own clock (0.90-1.04 of the parent's, 9 config-runs on a quiet 2-core host),
# each block's up to 6 % on 6 of 15; over 6 placements of 15, 0.955-1.034, and the harness's
# for the worker 0.961-1.042 (15 config-runs), this test passing 15 of 16 (one config at
# 1.052); over 10 placements of 9, 0.962-1.043 (18 config-runs), the test passing 10 of 10
# (2026-11-29).
AGREEMENT_SAMPLES, AGREEMENT_PLACEMENTS = 90, 10
# The most a busy thread of this process may wait for a core (its runqueue wait over its
# time) for the comparison to mean something. Each of the worker's samples holds two
# wake-ups (the worker's at the request, the parent's at the reply); on a host with more
# runnable threads than cores each waits for a core, which the parent's own samples never
# do: at load 8-11 on 2 cores (a probe thread waiting 52-63 % of its time) the worker read
# 1.1-4.3x the parent with one thread in each (2026-11-29).
LOADED = 0.2


def fp32_configs(shapes) -> list[AttentionConfig]:
    """Non-causal float32 configs of head dim 64, one per (batch, heads, seq_len), named
    after them (this test's and tools/verdict/cpu_agreement.py's)."""
    return [
        AttentionConfig(
            name=f"b{b}h{h}s{s}",
            batch=b,
            heads=h,
            seq_len=s,
            head_dim=64,
            dtype="float32",
            causal=False,
        )
        for b, h, s in shapes
    ]


def waiting_fraction(seconds: float = 0.3) -> float | None:
    """The share of `seconds` of busy work that this thread spent waiting for a core (the
    host's load from outside, benches/host_load.py), or None where Linux does not say."""
    waited = host_load.own_thread_wait_ns()
    if waited is None:
        return None
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass
    elapsed = time.perf_counter() - start
    return (host_load.own_thread_wait_ns() - waited) / 1e9 / elapsed


def skip_if_the_suite_fills_the_cores() -> None:
    """`make test`'s workers keep every core busy: the run would take 13 s of CPU and then
    be skipped as loaded (it was, in 5 of 5 suites on 2 cores, 2026-11-29)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = len(os.sched_getaffinity(0))
    if workers >= cores:
        pytest.skip(f"{workers} test processes on {cores} cores: run alone")


def skip_if_loaded(when: str) -> None:
    fraction = waiting_fraction()
    if fraction is not None and fraction > LOADED:
        pytest.skip(f"host loaded {when} the run: a busy thread waited {fraction:.0%} for a core")


def test_on_cuda_the_threads_are_left_as_torch_has_them(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    before = torch.get_num_threads()
    assert cpu_threads.use("cuda") is None
    assert torch.get_num_threads() == before
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_on_the_cpu_each_process_takes_half_the_cores_or_fewer_if_asked(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads.intra_op_threads("cpu") == max(1, cores // 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads.intra_op_threads("cpu") == 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores * 4))  # more than its share: the share
    assert cpu_threads.intra_op_threads("cpu") == max(1, cores // 2)


@pytest.mark.slow
def test_on_the_cpu_the_harness_and_its_worker_run_the_same_threads_and_the_run_says_so(
    tmp_path,
    registered,  # noqa: F811
    monkeypatch,
):
    """Started as a user starts bench (no thread variables, torch's default of a thread per
    core in the harness), a run on the CPU sets the harness and the kernel's worker to
    intra_op_threads("cpu") each, and environment.json records it. On the tree before, the
    harness and the worker ran a thread per core each (2 and 2 here), and fought."""
    for name in cpu_threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    expected = max(1, len(os.sched_getaffinity(0)) // 2)
    says = "import torch\nraise RuntimeError(f'threads={torch.get_num_threads()}')\n"
    kernel_tree(tmp_path, "counts", says)  # its gate row's message: the worker's threads
    small = AttentionConfig(
        name="b1h2s64", batch=1, heads=2, seq_len=64, head_dim=64, dtype="float32", causal=False
    )
    plan = registered(cpu_plan([user_kernel("counts", "counts")], [small], samples=2), tmp_path)
    try:
        with runner.StopRequested() as stop:
            run_dir = tmp_path / "run"
            ctx = runner.RunContext(
                plan, run_dir, "r", StatusWriter(run_dir / "status.json", "r"), stop
            )
            rows = runner.run_correctness(ctx)
            environment = runner.load_or_write_environment(run_dir)
        in_harness = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    (worker,) = [r.message for r in rows if r.implementation == "counts"]
    assert (in_harness, worker) == (expected, f"RuntimeError: threads={expected}")
    assert environment.cpu_threads == expected


@pytest.mark.slow
def test_a_call_timed_through_its_worker_agrees_with_the_same_call_in_the_harness(
    tmp_path,
    registered,  # noqa: F811
    monkeypatch,
):
    """SDPA as a user kernel in its worker against the registry's SDPA in the parent, one
    run (configs timed one call a sample: SHAPES), a process started as a user starts
    bench (no thread variables: torch's default of a thread per core): their medians within
    5 % on each config, compared within the run, so that a slow spell slows both alike.
    Before the shared setting, two processes of a thread per core on two cores read
    0.65-2.0 (tools/verdict/README.md); with it, and what a bracket adds read from a call
    that did nothing, taken back to back, 1.02-1.13 (the worker's own clock 0.96-1.02).
    Skipped where the host is loaded from outside, before or after the run (LOADED says
    why)."""
    for name in cpu_threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # torch's default without the variables
    kernel_tree(tmp_path, "same", "")
    configs = fp32_configs(SHAPES)
    plan = cpu_plan([user_kernel("same", "same")], configs, samples=AGREEMENT_SAMPLES)
    plan = registered(plan.model_copy(update={"placements": AGREEMENT_PLACEMENTS}), tmp_path)
    skip_if_the_suite_fills_the_cores()
    skip_if_loaded("before")
    try:
        checks, _ = run_whole(plan, tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
    skip_if_loaded("after")
    assert [r.message for r in checks if not r.passed] == []
    rows = read_csv(tmp_path / "run" / "results" / "measurements.csv", Measurement)
    ratios = {}
    for config in configs:
        mine = [r for r in rows if r.config == config.name]
        if any(r.calls != 1 for r in mine):
            continue  # batched in the worker (SHAPES says why)
        worker = statistics.median(r.latency_ms for r in mine if r.implementation == "same")
        parent = statistics.median(r.latency_ms for r in mine if r.implementation == "sdpa")
        ratios[config.name] = round(worker / parent, 3)
    assert len(ratios) >= 2, f"fewer than two configs timed one call a sample: {ratios}"
    assert all(abs(r - 1) <= AGREEMENT for r in ratios.values()), ratios
    environment = EnvironmentFingerprint.model_validate_json(
        (tmp_path / "run" / "environment.json").read_text(encoding="utf-8")
    )
    assert environment.cpu_threads == max(1, len(os.sched_getaffinity(0)) // 2)


@pytest.mark.slow
def test_on_the_cpu_the_parent_writes_the_fresh_queries_and_asks_for_the_call_without_a_seed(
    monkeypatch,
):
    """On the CPU the parent writes a sample's fresh queries into the lent buffers inside its
    bracket: a copy. The worker used to draw them itself from a seed each call brought, 0.5-3.5
    ms a sample at 1-2 x 8 x 512 x 64 on a 2-core host, varying from one draw to the next and
    between the kernel's worker and the calibration's: the harness read a worker's SDPA 2-14 %
    slower than the same SDPA in the parent, where its own clock read 0.94-0.99 (issue 49
    item 4). No call now brings a seed (a GPU worker of another user's still does: its queries
    are drawn on its GPU), and the lent buffers hold the parent's queries when it asks."""
    from benches import bracket as brackets
    from benches import isolation

    asked, refreshed, taking = [], [], []
    send, take = isolation.Worker.send, isolation.MeasuredPlacement._take

    def taken(self):
        taking.append(self)
        try:
            return take(self)
        finally:
            taking.pop()

    def spied(self, op, **fields):
        if op == "call":
            held = taking[-1]
            asked.append(fields)
            pairs = zip(held._queries, held._fresh, strict=True)
            refreshed.append(all(torch.equal(lent.tensor, fresh) for lent, fresh in pairs))
        return send(self, op, **fields)

    monkeypatch.setattr(isolation.MeasuredPlacement, "_take", taken)
    monkeypatch.setattr(isolation.Worker, "send", spied)
    (small,) = fp32_configs([(1, 4, 64)])
    worker = isolation.calibration_worker(torch.device("cpu"), flush_l2=False, gated=True)
    samples = isolation.CalibrationSamples(worker, brackets.CpuBracket(), secret=20261129)
    try:
        gaps = samples(small, "single", 1).bracketed
    finally:
        samples.close()
        worker.close()
    assert gaps and len(asked) >= len(gaps)
    assert all("seed" not in fields for fields in asked), asked[:2]
    assert refreshed and all(refreshed)
