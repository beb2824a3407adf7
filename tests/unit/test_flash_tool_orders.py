"""tools/flash_attention/bench.py's call orders: in the developer tools' interleaved timing
(ab.py, fp8_check.py turns, split_cost.py) every implementation follows every other equally
often, so that a call which leaves the GPU slower for the next taxes none of them alone."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from tests.flash_tools import load_tool


@pytest.fixture(scope="module")
def bench():
    return load_tool("bench")


def followers(orders: list[list[str]]) -> Counter:
    return Counter(pair for order in orders for pair in pairwise(order))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_each_name_follows_each_other_equally_often(bench, n):
    names = [f"impl{i}" for i in range(n)]
    design = n if n % 2 == 0 else 2 * n
    orders = bench.balanced_orders(names, 3 * design)
    assert all(sorted(order) == names for order in orders)
    counts = followers(orders)
    assert set(counts) == {(a, b) for a in names for b in names if a != b}
    assert len(set(counts.values())) == 1


def test_a_peer_is_followed_by_every_build_alike(bench):
    """The case that misled: builds A, B, A again and a peer P timed after them. One order
    rotated each round put A after P in three rounds of four, A-again never."""
    orders = bench.balanced_orders(["A", "B", "A-again", "P"], 8)
    after_peer = {b: count for (a, b), count in followers(orders).items() if a == "P"}
    assert after_peer == {"A": 2, "B": 2, "A-again": 2}
