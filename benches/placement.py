"""Placements: one implementation's buffers and captures for one block of a config's rounds.

A config's rounds are split among plan.placements blocks; in each block every identity gets
a fresh placement, built in a random order: a spacer of random size first (so its buffers
land at other offsets than last block's; best effort, the caching allocator decides),
then fresh copies of the inputs, fresh outputs, fresh graph captures. Built in turn, the
identities also take each other's freed blocks, so none keeps a lucky address for a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from benches import fp8, registry, timing
from results_schema import AttentionConfig

SPACER_MAX_BYTES = 8 << 20
SPACER_STEP_BYTES = 512  # the caching allocator's rounding
WARM_ROUNDS = 2  # untimed rounds on a new block's buffers and captures before samples count


class Placement:
    """Runs `run` (a registry implementation or a bare attention function) on fresh copies
    of `inputs` made in its layout (Implementation.to_native) before any timing;
    `sample()` times one sample, `last_output()` is what the latest call wrote, as
    [B, H, S, D], `refill(values)` writes new inputs into every copy (the captures read them
    from there too)."""

    def __init__(
        self,
        clock,
        run: registry.Implementation | Callable,
        inputs: tuple,
        causal: bool,
        mode: str,
        calls: int,
        rng: np.random.Generator,
    ) -> None:
        self._impl = registry.as_implementation(run)
        self._spacer = _spacer(inputs[0], rng)
        self.inputs = timing.input_copies(self._impl.native_inputs(inputs))
        self.descales = fp8.descales_of(inputs)  # FP8 inputs': rewritten by refill
        fns = [partial(self._impl.run, *x, causal, **self.descales) for x in self.inputs]
        if mode == "graph":
            batch = clock.graph_batch(fns, calls)
            self.sample = lambda: clock.time_call(batch) / calls
            written = batch.last_output
        elif mode == "batch":
            ring = timing.OutputRing()
            each = timing.cycling([ring.keep(f) for f in fns])
            self.sample = lambda: clock.time_call(lambda: [each() for _ in range(calls)]) / calls
            written = ring.last_output
        else:
            ring = timing.OutputRing()
            self.sample = timing.cycling([partial(clock.time_call, ring.keep(f)) for f in fns])
            written = ring.last_output
        impl = self._impl  # not self: a placement must die with its last reference, the
        # timing loop runs with the garbage collector off (a cycle would hold GPU memory)
        self.last_output = lambda: impl.bhsd_output(written())

    def refill(self, values: tuple, seed: int | None = None) -> None:
        """Write `values` (made from `seed`: a worker's placement makes them from it) into
        every copy."""
        native = self._impl.native_inputs(values)
        for copy in self.inputs:
            for tensor, value in zip(copy, native, strict=True):
                tensor.copy_(value)
        for name, value in fp8.descales_of(values).items():
            self.descales[name].copy_(value)


def _spacer(like, rng: np.random.Generator):
    import torch

    size = int(rng.integers(0, SPACER_MAX_BYTES // SPACER_STEP_BYTES)) * SPACER_STEP_BYTES
    return torch.empty(size, dtype=torch.uint8, device=like.device)


@dataclass(frozen=True)
class SeededInputs:
    """A config's inputs and the seed they were made from (a repro makes the same)."""

    config: AttentionConfig
    seed: int
    tensors: tuple


def build(
    clock,
    runs: dict[str, registry.Implementation | Callable],
    inputs: SeededInputs,
    mode: str,
    calls: int,
    rng: np.random.Generator,
    measuring: Callable[[str], object] | None = None,
) -> dict:
    """A fresh placement for every identity (a Placement here, or a worker's, timed by the
    parent as `measuring(identity)` says: benches/isolation.py), built in a random order,
    returned in `runs`' order."""
    names = list(runs)
    built = {}
    causal = inputs.config.causal
    for position in rng.permutation(len(names)):
        name, run = names[position], runs[names[position]]
        if hasattr(run, "place"):  # a user's kernel, placed in its worker process
            seed = int(rng.integers(2**63))
            built[name] = run.place(
                inputs.config, inputs.tensors, mode, calls, seed, measuring(name)
            )
        else:
            built[name] = Placement(clock, run, inputs.tensors, causal, mode, calls, rng)
    return {name: built[name] for name in names}


def release(placements: dict) -> None:
    """Free what the placements hold (a worker's are dropped there; a lost worker's are
    gone already)."""
    for held in placements.values():
        drop = getattr(held, "drop", None)
        if drop is not None:
            with contextlib.suppress(Exception):
                drop()
    placements.clear()


def confirm(held) -> None:
    """A worker's placement's samples checked, those it has not checked yet (isolation:
    MeasuredPlacement.confirm); the parent's own placements are checked by the runner."""
    confirm = getattr(held, "confirm", None)
    if confirm is not None:
        confirm()


def rounds_per_placement(rounds: int, placements: int) -> list[int]:
    """`rounds` split as evenly as possible over at most `placements` blocks, none empty."""
    count = max(1, min(placements, rounds))
    base, extra = divmod(rounds, count)
    return [base + (1 if i < extra else 0) for i in range(count)]
