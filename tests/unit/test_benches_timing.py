"""timing.settle: untimed interleaved rounds for a minimum time, before samples count."""

from __future__ import annotations

import time

import numpy as np

from benches import timing


def _counting_samplers(calls: dict[str, int]):
    def sampler(name: str):
        def sample() -> float:
            calls[name] += 1
            time.sleep(0.001)
            return 1.0

        return sample

    return {name: sampler(name) for name in calls}


def test_settle_runs_whole_rounds_until_the_deadline():
    calls = {"a": 0, "b": 0}
    started = time.perf_counter()
    rounds = timing.settle(_counting_samplers(calls), 0.05, np.random.default_rng(0))
    assert time.perf_counter() - started >= 0.05
    assert rounds >= 2 and calls == {"a": rounds, "b": rounds}


def test_settle_runs_at_least_one_round():
    calls = {"a": 0}
    assert timing.settle(_counting_samplers(calls), 0.0, np.random.default_rng(0)) == 1
    assert calls == {"a": 1}


def test_a_placement_is_freed_by_its_last_reference_alone():
    """The timing loop runs with the garbage collector off: a placement caught in a
    reference cycle would keep its buffers (and, on a GPU, its graphs) for the whole run
    (an H100 run of the default plan ran out of its 80 GB that way)."""
    import gc
    import weakref

    import numpy as np
    import torch

    from benches import placement, timing

    inputs = tuple(torch.randn(1, 2, 8, 16) for _ in range(3))
    gc.disable()
    try:
        for mode_impl in (lambda q, k, v, causal: q.clone(),):
            held = placement.Placement(
                timing.CpuClock(), mode_impl, inputs, False, "single", 1, np.random.default_rng(0)
            )
            held.sample()
            assert held.last_output() is not None
            gone = weakref.ref(held)
            del held
            assert gone() is None
    finally:
        gc.enable()
