"""The rows a harness reads of a worker's output, checked against float64 attention on
the harness's own inputs (benches/row_checks.py): every picked head at once, and every
pick of a sample judged from one read of the device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benches import row_checks
from benches.reference import reference_attention


def inputs(heads: int, kv_heads: int, seq: int = 40, dim: int = 16):
    generator = torch.Generator().manual_seed(7)

    def draw(h):
        return torch.randn(2, h, seq, dim, generator=generator).to(torch.float16)

    return draw(heads), draw(kv_heads), draw(kv_heads)


def reference(queries, k, v, rows, causal, descales=None):
    """The picks' reference from the stacked query buffers, as a placement's batch takes it
    (their rows gathered first)."""
    q_rows = row_checks.query_rows(queries, rows)
    return row_checks.reference(q_rows, k, v, rows, causal, queries.shape[2], descales)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (8, 2)], ids=["mha", "gqa"])
def test_the_picked_rows_are_the_rows_of_whole_float64_attention(heads, kv_heads, causal):
    q, k, v = inputs(heads, kv_heads)
    rows = row_checks.pick(tuple(q.shape), np.random.default_rng(3), torch.device("cpu"))
    whole = reference_attention(q, k, v, causal)
    expected = whole[rows.batch, rows.head, rows.position]
    got = reference(q[None], k, v, rows, causal)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_fp8_rows_read_the_values_their_descales_stand_for():
    q, k, v = inputs(4, 4)
    descales = (0.5, 0.25, 2.0)
    rows = row_checks.pick(tuple(q.shape), np.random.default_rng(5), torch.device("cpu"))
    whole = reference_attention(q.double() * 0.5, k.double() * 0.25, v.double() * 2.0, False)
    got = reference(q[None], k, v, rows, False, descales)
    torch.testing.assert_close(got, whole[rows.batch, rows.head, rows.position])


@pytest.mark.parametrize("causal", [False, True])
def test_a_graph_samples_picks_of_several_calls_are_each_their_own_calls_rows(causal):
    """Four picks, each of another of the harness's query buffers, referenced in one
    batch: each pick's part is the whole attention of its own call's queries."""
    q, k, v = inputs(8, 2)
    queries = torch.stack([q, -q, q * 0.5, q.flip(2)])
    calls = (3, 0, 2, 1)
    rows = row_checks.pick(tuple(q.shape), np.random.default_rng(9), torch.device("cpu"), calls)
    got = reference(queries, k, v, rows, causal).view(len(calls), -1, q.shape[-1])
    for index, call in enumerate(calls):
        whole = reference_attention(queries[call], k, v, causal)
        torch.testing.assert_close(got[index], whole[rows.of_pick(index)], rtol=1e-12, atol=1e-12)
    outs = [reference_attention(queries[call], k, v, causal).half() for call in calls]
    outs[2] = outs[2].clone()
    outs[2][rows.of_pick(2)[0][5], rows.of_pick(2)[1][5], rows.of_pick(2)[2][5]] += 1.0
    verdicts = row_checks.problems(
        row_checks.gatherer(outs, rows)(), got.view(-1, q.shape[-1]), 0.01
    )
    assert [problem is None for problem, _ in verdicts] == [True, True, False, True]


def test_each_pick_of_a_sample_gets_its_own_verdict_in_order():
    right = torch.zeros(32, 16, dtype=torch.float64)
    off = right.clone()
    off[3, 4] = 0.5
    holed = right.clone()
    holed[0, :2] = float("nan")
    verdicts = row_checks.problems(
        [right.half(), off.half(), holed.half()], torch.cat([right, right, right]), tolerance=0.01
    )
    assert verdicts[0] == (None, 0.0)
    assert verdicts[1] == ("max error 0.5 over tolerance 0.01 in the rows checked", 0.5)
    assert verdicts[2][0] == "2 non-finite elements in the rows checked"


def test_samples_kept_unchecked_are_judged_together_each_by_its_own_queries():
    """A placement's samples, each with its own fresh queries, kept (row_checks.Unchecked)
    and judged in one batch: each pick is held to its own sample's attention, and a wrong row
    is named by its sample and call."""
    q, k, v = inputs(8, 2)
    unchecked = row_checks.Unchecked(k.shape[-2] * k.shape[-1])
    rng = np.random.default_rng(11)
    for sample, queries in enumerate((q, -q, q * 0.5), start=1):
        rows = row_checks.pick(tuple(q.shape), rng, torch.device("cpu"))
        out = reference_attention(queries, k, v, True).half()
        if sample == 2:
            batch, head, position = rows.of_pick(0)
            out[batch[7], head[7], position[7]] += 1.0
        q_rows = row_checks.query_rows(queries[None], rows)
        unchecked.add(sample, (0,), rows, q_rows, row_checks.gatherer([out], rows)())
    assert len(unchecked) == 3
    verdicts = unchecked.verdicts(k, v, True, q.shape[1], 0.01)
    assert [(v.sample, v.call, v.problem is None) for v in verdicts] == [
        (1, 0, True),
        (2, 0, False),
        (3, 0, True),
    ]
    assert len(unchecked) == 0 and unchecked.verdicts(k, v, True, q.shape[1], 0.01) == []


def test_a_batch_is_full_once_its_heads_keys_reach_the_bound():
    unchecked = row_checks.Unchecked(row_checks.REFERENCE_KEYS_MAX // (2 * row_checks.ROW_HEADS))
    rows = row_checks.pick((1, 4, 8, 2), np.random.default_rng(1), torch.device("cpu"))
    unchecked.add(1, (0,), rows, torch.zeros(row_checks.ROWS_PER_PICK, 2), [])
    assert not unchecked.full
    unchecked.add(2, (0,), rows, torch.zeros(row_checks.ROWS_PER_PICK, 2), [])
    assert unchecked.full
