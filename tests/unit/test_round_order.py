"""The rounds' order (benches/round_order.py): strongly balanced for the sample before."""

from __future__ import annotations

from collections import Counter

import pytest

from benches.round_order import RoundOrder


def names_of(k: int) -> list[str]:
    return [f"impl-{i}" for i in range(k)]


@pytest.mark.parametrize("k", range(1, 25))
def test_over_a_cycle_every_identity_follows_every_identity_twice_and_holds_every_place_twice(k):
    names = names_of(k)
    order = RoundOrder(seed=7 + k)
    rounds = [order.next_round(names) for _ in range(4 * k)]  # two cycles of 2k rounds

    assert all(sorted(r) == sorted(names) for r in rounds)
    chain = [name for r in rounds for name in r]
    cycle = 2 * k * k  # one cycle's samples, each with the one before (the last's: the next)
    follows = Counter(zip(chain[:cycle], chain[1 : cycle + 1], strict=True))
    assert follows == {(a, b): 2 for a in names for b in names}
    places = Counter((name, place) for r in rounds[: 2 * k] for place, name in enumerate(r))
    assert set(places.values()) == {2} and len(places) == k * k
    assert rounds[2 * k :] == rounds[: 2 * k]  # the cycle repeats


def test_a_later_look_carries_on_the_cycle_where_the_earlier_stopped():
    names = names_of(6)
    whole = RoundOrder(seed=3)
    expected = [whole.next_round(names) for _ in range(30)]
    first = RoundOrder(seed=3)
    looked = [first.next_round(names) for _ in range(20)]
    later = RoundOrder(seed=3, rounds_before=20)
    assert looked + [later.next_round(names) for _ in range(10)] == expected


def test_the_order_is_the_seeds_and_differs_between_seeds():
    names = names_of(5)
    a, b, c = RoundOrder(1), RoundOrder(1), RoundOrder(2)
    rounds = [[o.next_round(names) for _ in range(10)] for o in (a, b, c)]
    assert rounds[0] == rounds[1] != rounds[2]


def test_an_identity_lost_leaves_a_balanced_design_of_the_rest():
    names = names_of(5)
    order = RoundOrder(seed=11)
    for _ in range(3):
        order.next_round(names)
    rest = names[:2] + names[3:]
    rounds = [order.next_round(rest) for _ in range(2 * len(rest))]
    chain = [name for r in rounds for name in r] + rounds[0][:1]
    follows = Counter(zip(chain, chain[1:], strict=False))
    assert follows == {(a, b): 2 for a in rest for b in rest}
