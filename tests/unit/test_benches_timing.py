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
