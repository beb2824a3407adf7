"""How many calls a worker's sample holds on the CPU (benches/runner.py `_cpu_batches`): one
count for every worker of a config, whatever each one's own warm-up read."""

from __future__ import annotations

from dataclasses import dataclass

from benches import runner, timing


@dataclass
class Worked:
    """A worker's placement as `_cpu_batches` sees it: its fastest own time in the warm-up."""

    fastest_ms: float | None

    def own_fastest_ms(self) -> float | None:
        return self.fastest_ms


class Parents:
    """The harness's own placement: no own time, one call a sample."""


def test_identical_trees_on_either_side_of_a_count_get_the_same_count():
    """Two warm-ups of one kernel 10 % apart straddling a count's edge: before, each
    worker's own count (1 and 2 here), and the one with more calls read 4 % slower a call
    on identical trees (36 loaded CPU runs, 2026-11-29)."""
    edge_ms = timing.GRAPH_BATCH_TARGET_US / 1e3  # from here down: two calls or more
    trial = {"cand": Worked(edge_ms * 0.95), "base": Worked(edge_ms * 1.05), "sdpa": Parents()}
    settled = {"cand": 3.0, "base": 3.0, "sdpa": 3.0}
    assert timing.batch_calls_for(edge_ms * 0.95e3) != timing.batch_calls_for(edge_ms * 1.05e3)

    batches = runner._cpu_batches(timing.CpuClock(), trial, settled)

    assert set(batches) <= {"cand", "base"} and len(set(batches.values())) <= 1
    assert batches.get("cand") == batches.get("base")


def test_the_shared_count_follows_the_workers_typical_time_and_spares_the_harnesss_own():
    fast, slow = 0.1, 0.4  # ms: geometric mean 0.2 ms, 10 calls to reach the 2 ms target
    trial = {"a": Worked(fast), "b": Worked(slow), "c": Worked(None), "sdpa": Parents()}
    settled = {"a": 9.0, "b": 9.0, "c": 0.2, "sdpa": 0.05}  # c: no own time, its settled one
    batches = runner._cpu_batches(timing.CpuClock(), trial, settled)
    assert batches == dict.fromkeys(("a", "b", "c"), timing.batch_calls_for(0.2e3))
    assert "sdpa" not in batches


def test_calls_of_two_milliseconds_or_more_stay_one_a_sample():
    trial = {"a": Worked(2.5), "b": Worked(3.0)}
    assert runner._cpu_batches(timing.CpuClock(), trial, {"a": 3.0, "b": 3.0}) == {}
