"""The cheat suite on a GPU (issue 48): the cheats that need one (tests/cheats: side streams,
a thread launching the work after the call, a lazy tensor subclass, a CUDA-graph trick,
patched CUDA events, an over-limit shared-memory launch, an L2 persistence window) and the
device-agnostic ones again, where the GPU path differs (outputs read in the worker's own
memory through IPC, graph mode), each through the real harness with real worker processes.
Each must end with its row failed naming what was seen, or (the L2 window) gain nothing,
while the kernel that only calls SDPA passes: bench times what a repository ships, and a
kernel that calls cuDNN or FlashAttention under the hood is that kernel (its row names the
tree that ran; it is as fast as SDPA, not faster).

The CPU suite, its helpers and its expectations are tests/unit/test_cheat_suite.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from results_schema import AttentionConfig, Plan, SummaryRow
from tests.unit.test_cheat_suite import (
    CANDIDATE,
    GATE,
    TIMING,
    WRONG_OUTPUT,
    WRONG_ROWS,
    cheat_kernel,
    cheat_plan,
    results,
    run_plan,
    where_caught,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.timeout(1800),
]

EITHER = (GATE, TIMING)
ANY_LINE = r".+"
# Graph mode (about 10 us a call) at head dim 16, where collapsed_shape collapses; single
# launches (about 0.1 ms) at 64.
CONFIGS = [
    AttentionConfig(
        name="tiny", batch=1, heads=2, seq_len=128, head_dim=16, dtype="float16", causal=True
    ),
    AttentionConfig(
        name="mid", batch=4, heads=16, seq_len=2048, head_dim=64, dtype="float16", causal=True
    ),
]

# identity -> (cheat folder, its entry point if not the contract's, where it must be caught,
# what its line must say), on every config. The gate's graph probe replays a captured call
# on fresh inputs with its output poisoned; what it catches fails the gate's row
# ("graph-probe: ..." in correctness.csv).
CAUGHT = {
    "side-stream": ("side_stream", None, EITHER, ANY_LINE),
    "side-stream-unforked": ("side_stream", "cheat.ops:unforked", EITHER, ANY_LINE),
    "background-thread": ("background_thread", None, EITHER, ANY_LINE),
    "lazy-output": ("lazy_output", None, (TIMING,), WRONG_ROWS),
    "graph-cache": ("graph_cache", None, (GATE,), WRONG_OUTPUT),
    "event-patch": (
        "event_patch",
        None,
        (TIMING,),
        r"its process reported \S+ ms a call where the harness measured \S+ ms",
    ),
    "garbage-while-timed": ("garbage_while_timed", None, (TIMING,), WRONG_ROWS),
    "output-cache": ("output_cache", None, EITHER, f"{WRONG_OUTPUT}|{WRONG_ROWS}"),
    "batch-and-skip": ("batch_and_skip", None, EITHER, f"{WRONG_OUTPUT}|{WRONG_ROWS}"),
    "input-mutation": ("input_mutation", None, (TIMING,), r"sample \d+: modified its input v"),
    "stale-memory": ("stale_memory", None, (GATE,), WRONG_OUTPUT),
    "nan-wildcard": ("nan_wildcard", None, (GATE,), r"\d+ non-finite output elements"),
    "reads-expected": ("reads_expected", None, (GATE,), WRONG_OUTPUT),
}
if importlib.util.find_spec("triton") is not None:  # the over-limit launch is Triton's
    CAUGHT["smem-over-limit"] = ("smem_over_limit", None, (GATE,), WRONG_OUTPUT)


def gpu_plan(kernels, configs=CONFIGS, samples: int = 12, **update) -> Plan:
    plan = cheat_plan(kernels, configs, samples)
    return plan.model_copy(
        update={"device": "cuda", "flush_l2": True, "graph_below_us": 20.0, **update}
    )


@pytest.fixture(scope="module")
def gpu_cheat_run(tmp_path_factory) -> Path:
    """One run of every cheat of CAUGHT and collapsed_shape beside the SDPA kernel (the
    candidate): its run folder."""
    root = tmp_path_factory.mktemp("cheat-suite-gpu")
    kernels = [
        cheat_kernel(root, "sdpa_inside"),
        cheat_kernel(root, "collapsed_shape"),
        *(cheat_kernel(root, c[0], identity, c[1]) for identity, c in CAUGHT.items()),
    ]
    run_plan(gpu_plan(kernels), root, root / "run")
    return root / "run"


@pytest.mark.parametrize("identity", sorted(CAUGHT))
def test_each_cheat_fails_its_rows_on_the_gpu(gpu_cheat_run, identity):
    _, _, stages, says = CAUGHT[identity]
    for config in CONFIGS:
        caught = where_caught(gpu_cheat_run, identity, config.name)
        assert caught, f"{identity} got through on {config.name}"
        (where, message), *_ = caught
        assert where in stages, (config.name, caught)
        assert re.fullmatch(f".*({says}).*", message), (config.name, message)
        assert "\n" not in message


def test_a_shape_driven_to_nothing_fails_only_there_on_the_gpu(gpu_cheat_run):
    caught = where_caught(gpu_cheat_run, "collapsed-shape", "tiny")
    assert caught and caught[0][0] == TIMING and re.match(WRONG_ROWS, caught[0][1]), caught
    assert where_caught(gpu_cheat_run, "collapsed-shape", "mid") == []


def test_a_kernel_calling_sdpa_under_the_hood_passes_as_itself(gpu_cheat_run):
    """Cheat 14 of kernel leaderboards ("baseline kernel") is no cheat here: the row is
    the repository's kernel, whatever it calls, named by its tree; it passes every check,
    graph mode and single launches alike."""
    for config in CONFIGS:
        assert where_caught(gpu_cheat_run, CANDIDATE, config.name) == []
    summary = [
        r
        for r in results(gpu_cheat_run, "summary.csv", SummaryRow)
        if r.implementation == CANDIDATE
    ]
    assert {r.mode for r in summary} == {"graph", "single"}, [(r.config, r.mode) for r in summary]
    assert all(r.flag != "wrong-timed-output" for r in summary), summary
    assert all(r.backend.startswith("user:sdpa-inside@") for r in summary), summary


def test_an_l2_persistence_window_gains_nothing_over_its_twin(tmp_path):
    """persisting_window marks k persisting in L2 (an access-policy window on its stream,
    the persisting set-aside at the device's most) and `twin` is the same code without it,
    at a shape whose k and v are a large part of its traffic (64 x 16 heads x 256 x 64, about
    50 us): the harness's own L2 flush between samples leaves the window nothing to keep, so
    it gains nothing over its twin, or its rows fail (the set-aside is the device's: it
    slows the harness's own work in the bracket, and the window's report then falls that far
    under the harness's figure, 0.092 against 0.136 ms on an H200)."""
    config = AttentionConfig(
        name="wide", batch=64, heads=16, seq_len=256, head_dim=64, dtype="float16", causal=False
    )
    kernels = [
        cheat_kernel(tmp_path, "persisting_window"),
        cheat_kernel(tmp_path, "persisting_window", "l2-twin", "cheat.ops:twin"),
    ]
    plan = gpu_plan(kernels, [config], samples=60, placements=3)
    run_plan(plan, tmp_path, tmp_path / "run")
    run_dir = tmp_path / "run"
    assert where_caught(run_dir, "l2-twin", "wide") == []
    if where_caught(run_dir, "l2-window", "wide"):
        return  # its rows failed: no time of it stands
    (twin,) = [
        r for r in results(run_dir, "summary.csv", SummaryRow) if r.implementation == "l2-twin"
    ]
    assert twin.versus == "l2-window"
    # The window kernel's speedup over its twin: a few percent of noise at most.
    assert twin.speedup < 1.03, (twin.speedup, twin.speedup_ci_low, twin.speedup_ci_high)


def with_env(kernel, **env):
    """`kernel` with its contract's env set to `env`."""
    return kernel.model_copy(update={"contract": kernel.contract.model_copy(update={"env": env})})


@pytest.mark.xfail(
    strict=True,
    reason="on the GPU the sample is still the worker's own events, checked against the "
    "harness's bracket (benches/isolation.py GPU_REPORT_ALLOWANCE_MS): a lie within the "
    "allowance gains; this one sits at the allowance's edge here (it gained before the "
    "rule's second look, and was refused in 3 of 3 runs after: H200, 2026-11-29)",
)
def test_a_mild_lie_of_its_own_events_changes_no_verdict(tmp_path):
    """event_patch's events reading 1/1.25 of the time they span, a lie within any
    tolerance for a report, against the same code whose events read true: the sample is
    the harness's figure, so the two are timed alike, in graph mode and single launches.
    (A harness that took the worker's events for the sample would read it 1.25x faster.)"""
    mild = with_env(cheat_kernel(tmp_path, "event_patch", "events-mild"), ELAPSED_DIVISOR="1.25")
    true = with_env(cheat_kernel(tmp_path, "event_patch", "events-true"), ELAPSED_DIVISOR="1")
    run_plan(gpu_plan([mild, true], samples=30, placements=3), tmp_path, tmp_path / "run")
    run_dir = tmp_path / "run"
    summary = results(run_dir, "summary.csv", SummaryRow)
    for config in CONFIGS:
        assert where_caught(run_dir, "events-mild", config.name) == []  # within tolerance
        (row,) = [
            r for r in summary if (r.config, r.implementation) == (config.name, "events-true")
        ]
        assert row.versus == "events-mild"
        # The mild liar's speedup over its truthful twin: a few percent of noise at most.
        assert row.speedup < 1.05, (config.name, row.speedup_ci_low, row.speedup_ci_high)


def test_a_lie_past_the_allowance_fails_its_rows(tmp_path):
    """event_patch's events reading half the time they span: past the allowance a report
    has on the GPU (benches/isolation.py GPU_REPORT_ALLOWANCE_MS: single launches of about
    0.1 ms here, 0.02 ms and 10 %), so its rows fail naming both figures, while the same
    code whose events read true passes. (At 1/1.6 it was caught on one config of two, an
    H200, 2026-11-29: 0.02 ms and 10 % is 30 % of a 0.1 ms call.)"""
    liar = with_env(cheat_kernel(tmp_path, "event_patch", "events-liar"), ELAPSED_DIVISOR="2")
    true = with_env(cheat_kernel(tmp_path, "event_patch", "events-true"), ELAPSED_DIVISOR="1")
    run_plan(gpu_plan([liar, true], samples=20, placements=2), tmp_path, tmp_path / "run")
    run_dir = tmp_path / "run"
    for config in CONFIGS:
        caught = where_caught(run_dir, "events-liar", config.name)
        assert caught and caught[0][0] == TIMING, (config.name, caught)
        assert re.match(
            r"its process reported \S+ ms a call where the harness measured", caught[0][1]
        ), caught
        assert where_caught(run_dir, "events-true", config.name) == []
