"""The order of a config's identities within each round: balanced for what ran just before.

A sample is not independent of the one before it. Measured on a loaded 2-core CPU (12
cpu-smoke runs of the gate recipe's identical trees, 2026-11-29): SDPA timed right after
its A/A twin read 16 % under its median, right after a user kernel's worker call 7-12 %
over it. Rounds drawn as independent random permutations from the plan's seed gave every
run the same sequence, in which one config's twin followed SDPA 38 times and SDPA followed
the twin 18: the control's speedup there read 1.10 in every run, and the run-wide A/A
control sat under 1 in 11 runs of 12 (0.970 on average), once judged slower. The same
imbalance between a candidate and its baseline is a verdict the code under test did not
earn.

So the rounds follow a carryover-balanced design (Williams, "Experimental designs balanced
for the estimation of residual effects of treatments", Aust. J. Sci. Res. 2, 1949): k rows
in which each identity takes each position once and follows each other identity once (for
even k; odd k needs the rows reversed as well), then k more rows (`design_rows`).
Consecutive rounds add one more neighbour, the last of a round before the first of the
next; the rows are chained so that each round starts with the identity that ended the one
before. Over a whole cycle of 2k rounds every identity then comes after every identity,
itself included, exactly twice, and takes every position twice (a strongly balanced
design): whatever the one before does to a sample, it does to each identity alike. A
partial cycle at a look's end leaves at most one cycle's imbalance, where independent
draws grew theirs with the run.

Which identity takes which place in the design, and where the cycle starts, come from the
seed it is given (runner.layout_seed: the plan's and the run's secret, so each run draws
its own), the same across a config's looks, whose rounds carry on the cycle.
"""

from __future__ import annotations

import numpy as np


def williams_square(k: int) -> list[list[int]]:
    """Williams's k rounds of identities 0..k-1: (0, 1, k-1, 2, k-2, ...) shifted by each
    row's index. For even k each identity follows each other once; odd k needs two."""
    first, low, high = [0], 1, k - 1
    while len(first) < k:
        first.append(low)
        low += 1
        if len(first) < k:
            first.append(high)
            high -= 1
    return [[(x + shift) % k for x in first] for shift in range(k)]


def design_rows(k: int, rng: np.random.Generator) -> list[list[int]]:
    """2k rounds in which each identity follows each other twice and takes each position
    twice: the square and, for odd k, its rows reversed (Williams's own pair); for even k
    the square again under a random relabelling, itself balanced, since the mirror of an
    even square ends each row where the square's ends and so cannot be chained."""
    square = williams_square(k)
    if k % 2:
        return square + [row[::-1] for row in square]
    relabel = rng.permutation(k)
    return square + [[int(relabel[x]) for x in row] for row in square]


def chained(rows: list[list[int]], k: int, rng: np.random.Generator) -> list[list[int]]:
    """`rows` in an order in which each row's last identity starts the next row: every seam
    is an identity after itself. Each identity ends two rows and starts two (the design's
    position balance), so its two seams can be dealt to its rows; the deal that makes one
    cycle of all rows is found by merging cycles."""
    ending = {a: [i for i, r in enumerate(rows) if r[-1] == a] for a in range(k)}
    successor: dict[int, int] = {}
    for a in range(k):
        starting = [i for i, r in enumerate(rows) if r[0] == a]
        for row, after in zip(ending[a], rng.permutation(starting), strict=True):
            successor[row] = int(after)
    _merge_cycles(successor, ending)
    order, row = [], int(rng.integers(len(rows)))
    for _ in rows:
        order.append(rows[row])
        row = successor[row]
    return order


class Unchainable(Exception):
    """The rows fall into cycles that no swap of seams joins."""


def _merge_cycles(successor: dict[int, int], ending: dict[int, list[int]]) -> None:
    """One cycle through all rows: two rows that end on the same identity but lie on
    different cycles swap their successors, which joins the cycles and keeps every seam."""
    while True:
        cycle_of = _cycles(successor)
        if len(set(cycle_of.values())) == 1:
            return
        for x, y in ending.values():
            if cycle_of[x] != cycle_of[y]:
                successor[x], successor[y] = successor[y], successor[x]
                break
        else:  # no two such rows: these rows cannot make one chain
            raise Unchainable


def _cycles(successor: dict[int, int]) -> dict[int, int]:
    cycle_of: dict[int, int] = {}
    for start in successor:
        row = start
        while row not in cycle_of:
            cycle_of[row] = start
            row = successor[row]
    return cycle_of


class RoundOrder:
    """The order of each round of one config: `next_round(names)` gives the next; a new set
    of names (an identity lost) starts a design of its own."""

    def __init__(self, seed: int, rounds_before: int = 0) -> None:
        self._seed, self._cursor = seed, rounds_before
        self._names: list[str] = []
        self._cycle: list[list[str]] = []

    def next_round(self, names: list[str]) -> list[str]:
        if names != self._names:
            if self._names:
                self._cursor = 0
            self._names, self._cycle = list(names), self._design(names)
        row = self._cycle[self._cursor % len(self._cycle)]
        self._cursor += 1
        return row

    def _design(self, names: list[str]) -> list[list[str]]:
        k = len(names)
        if k == 0:
            return [[]]
        rng = np.random.default_rng([self._seed, k])
        label = [names[i] for i in rng.permutation(k)]
        while True:  # an even k's relabelling may not chain: draw another (a few at most)
            try:
                rows = chained(design_rows(k, rng), k, rng)
                break
            except Unchainable:
                continue
        return [[label[i] for i in row] for row in rows]
