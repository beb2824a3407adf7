"""Placements: one implementation's buffers and captures for one block of a config's rounds.

A config's rounds are split among plan.placements blocks; in each block every identity gets
a fresh placement, built in a random order: a spacer of random size first (so its buffers
land at other offsets than last block's; best effort, the caching allocator decides),
then fresh copies of the inputs, fresh outputs, fresh graph captures. Built in turn, the
identities also take each other's freed blocks, so none keeps a lucky address for a run.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from benches import timing

SPACER_MAX_BYTES = 8 << 20
SPACER_STEP_BYTES = 512  # the caching allocator's rounding
WARM_ROUNDS = 2  # untimed rounds on a new block's buffers and captures before samples count


class Placement:
    """Runs `run` on fresh copies of `inputs`; `sample()` times one sample, `last_output()`
    is what the latest call wrote, `refill(values)` writes new inputs into every copy (the
    captures read them from there too)."""

    def __init__(
        self,
        clock,
        run: Callable,
        inputs: tuple,
        causal: bool,
        mode: str,
        calls: int,
        rng: np.random.Generator,
    ) -> None:
        self._spacer = _spacer(inputs[0], rng)
        self.inputs = timing.input_copies(inputs)
        fns = [partial(run, *x, causal) for x in self.inputs]
        if mode == "graph":
            batch = clock.graph_batch(fns, calls)
            self.sample = lambda: clock.time_call(batch) / calls
            self.last_output = batch.last_output
        else:
            ring = timing.OutputRing()
            self.sample = timing.cycling([partial(clock.time_call, ring.keep(f)) for f in fns])
            self.last_output = ring.last_output

    def refill(self, values: tuple) -> None:
        for copy in self.inputs:
            for tensor, value in zip(copy, values, strict=True):
                tensor.copy_(value)


def _spacer(like, rng: np.random.Generator):
    import torch

    size = int(rng.integers(0, SPACER_MAX_BYTES // SPACER_STEP_BYTES)) * SPACER_STEP_BYTES
    return torch.empty(size, dtype=torch.uint8, device=like.device)


def build(
    clock,
    runs: dict[str, Callable],
    inputs: tuple,
    causal: bool,
    mode: str,
    calls: int,
    rng: np.random.Generator,
) -> dict[str, Placement]:
    """A fresh placement for every identity, built in a random order, returned in `runs`'
    order."""
    names = list(runs)
    built = {}
    for position in rng.permutation(len(names)):
        name = names[position]
        built[name] = Placement(clock, runs[name], inputs, causal, mode, calls, rng)
    return {name: built[name] for name in names}


def rounds_per_placement(rounds: int, placements: int) -> list[int]:
    """`rounds` split as evenly as possible over at most `placements` blocks, none empty."""
    count = max(1, min(placements, rounds))
    base, extra = divmod(rounds, count)
    return [base + (1 if i < extra else 0) for i in range(count)]
