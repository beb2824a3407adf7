"""Implementations that cheat the timer, each of which the harness must catch.

Each cheat is registered under a name for one test and run through the real gate and the
real benchmark loop (in process) against honest SDPA. Caught means: its gate row fails, or
its timed-loop output check fails and its summary row is flagged with no verdict.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benches import registry, runner
from benches.writers import StatusWriter, read_csv
from results_schema import AttentionConfig, CorrectnessRow, EnvironmentFingerprint, Plan

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def cached_output():
    """Computes once, then returns that first output for every input."""
    kept = []

    def run(q, k, v, causal):
        if not kept:
            kept.append(sdpa(q, k, v, causal))
        return kept[0]

    return run


def unjoined_side_stream(forked: bool):
    """Does the work on a side stream the calling stream never waits for, so events on the
    calling stream see an instant call. Forked: the side stream first waits for the caller
    (it reads valid inputs); not forked: it does not even do that."""
    side = torch.cuda.Stream()

    def run(q, k, v, causal):
        if forked:
            side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return sdpa(q, k, v, causal)

    return run


def skips_repeated_inputs(honest_calls: int):
    """Memoizes on the input buffers' addresses and then only copies, once it has made
    `honest_calls` honest calls in all (10 covers the gate's and the probe's calls on this
    file's plan, so only the timed loop's checks can catch it)."""
    seen: dict[tuple, torch.Tensor] = {}
    calls = [0]

    def run(q, k, v, causal):
        calls[0] += 1
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), causal)
        if calls[0] > honest_calls and key in seen:
            return seen[key].clone()
        seen[key] = sdpa(q, k, v, causal)
        return seen[key]

    return run


def writes_half_the_output():
    """Computes the first half of the queries only; the rest is whatever the memory held."""

    def run(q, k, v, causal):
        out = torch.empty_like(q)
        half = q.shape[-2] // 2
        out[..., :half, :] = sdpa(q[..., :half, :], k, v, causal)
        return out

    return run


CHEATS = {
    "cached-output": cached_output,
    "side-stream-forked": lambda: unjoined_side_stream(forked=True),
    "side-stream-unforked": lambda: unjoined_side_stream(forked=False),
    "skips-repeated-inputs": lambda: skips_repeated_inputs(honest_calls=0),
    "skips-repeated-inputs-after-the-gate": lambda: skips_repeated_inputs(honest_calls=10),
    "writes-half": writes_half_the_output,
}


def run_plan(tmp_path, candidate: str):
    plan = Plan.model_validate(
        {
            "name": "cheats",
            "description": "a cheat against SDPA",
            "device": "cuda",
            "candidate": candidate,
            "compared_with": ["sdpa"],
            "reference": "reference",
            "samples_per_config": 12,
            "placements": 3,
            "graph_below_us": 20.0,
            "configs": [
                AttentionConfig(  # graph mode
                    name="tiny",
                    batch=1,
                    heads=1,
                    seq_len=128,
                    head_dim=64,
                    dtype="float16",
                    causal=False,
                ),
                AttentionConfig(  # single launches
                    name="mid",
                    batch=4,
                    heads=16,
                    seq_len=1024,
                    head_dim=64,
                    dtype="float16",
                    causal=True,
                ),
            ],
        }
    )
    with runner.StopRequested() as stop:
        ctx = runner.RunContext(plan, tmp_path, "cheat-run", StatusWriter(None, "x"), stop)
        gate = runner.run_correctness(ctx)
        _, summary = runner.run_benchmark(ctx, gate, None, EnvironmentFingerprint())
    timed = read_csv(tmp_path / "results" / "timed_checks.csv", CorrectnessRow)
    return gate, timed, summary


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_every_cheat_is_caught(tmp_path, monkeypatch, name):
    impl = registry.Implementation(name, CHEATS[name](), lambda *a: "cheat", lambda d: None)
    monkeypatch.setitem(registry.IMPLEMENTATIONS, name, impl)
    gate, timed, summary = run_plan(tmp_path, name)
    for config in ("tiny", "mid"):
        gate_row = next(r for r in gate if (r.config, r.implementation) == (config, name))
        wrong = [
            r for r in timed if (r.config, r.implementation) == (config, name) and not r.passed
        ]
        rows = [s for s in summary if s.config == config]
        caught = not gate_row.passed or (
            wrong and all(s.verdict is None for s in rows if name in (s.implementation, s.versus))
        )
        assert caught, (config, gate_row, wrong, rows)
        honest = [r for r in timed if (r.config, r.implementation) == (config, "sdpa")]
        assert honest and all(r.passed for r in honest)


def test_honest_sdpa_passes_every_check(tmp_path, monkeypatch):
    monkeypatch.setitem(
        registry.IMPLEMENTATIONS,
        "honest",
        registry.Implementation("honest", sdpa, lambda *a: "sdpa", lambda d: None),
    )
    gate, timed, summary = run_plan(tmp_path, "honest")
    assert all(r.passed for r in gate) and all(r.passed for r in timed)
    assert {r.stage for r in timed} == {"timed-first", "timed-last"}
    assert all(s.flag is None for s in summary)
    assert all(s.verdict is not None for s in summary if s.implementation == "sdpa")
