"""Every timed call of a worker's kernel checked where the harness reads it.

A kernel that runs in its own process could tell a timed call from a checked one and
answer garbage only while timed (a frame lookup does it). So the harness checks every
sample it times: before the call it writes fresh random queries into the worker's input
buffer, after it reads back rows of the output that it picks then — ROW_HEADS random
(batch, head) pairs, ROWS_PER_HEAD random positions in each — from where the output lies
(benches/bracket.py), and compares them with the float64 reference computed here from its
own copy of the inputs. A kernel does not know which rows will be read, nor the queries
before the call starts: a cached, stale, partial or lazy answer fails, as does one written
after the call reported done. (A block's warm calls, before its samples, are neither timed
nor checked: nothing of them becomes a sample.)

The rows are read inside each sample's bracket; their reference is computed and compared
later, for many samples at once (`Unchecked`): a sample's own check, its float64 reference
launched and its figures read back, held the host for 0.6 ms of every worker sample on an
H200, where a batch's costs 0.1-0.2 ms a sample (tools/verdict/check_graph_probe.py, issue 48
item 6). The queries a sample's rows
need are gathered at once, before the next sample's overwrite them. Every sample is checked
before its block ends, before its config's timed checks and so before any verdict
(benches/runner.py): a wrong row still refuses the kernel, naming its sample, a few samples
later.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import torch

from benches.reference import reference_rows

ROW_HEADS = 4
ROWS_PER_HEAD = 8
ROWS_PER_PICK = ROW_HEADS * ROWS_PER_HEAD
# How many keys (elements, and as many values) one batched reference may hold in float64
# (`Unchecked.full`): 128 MiB each. A sample of 4 heads adds 2^18 at 1,024 keys and D = 64,
# 2^23 at 16,384 keys and D = 128: a long config is checked a sample or two at a time.
REFERENCE_KEYS_MAX = 1 << 24


@dataclass(frozen=True)
class Rows:
    """Which output rows a sample's check reads, for each of its picks (a call whose output
    is read: graph mode reads several): index tensors of one length, ROW_HEADS x
    ROWS_PER_HEAD entries a pick, pick after pick."""

    call: torch.Tensor  # which of the harness's query buffers the call was given
    batch: torch.Tensor
    head: torch.Tensor
    position: torch.Tensor

    def of_pick(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch, head, position) of one pick's rows (views: no copy, no launch)."""
        span = slice(index * ROWS_PER_PICK, (index + 1) * ROWS_PER_PICK)
        return self.batch[span], self.head[span], self.position[span]


def pick(
    shape: tuple[int, ...],
    rng: np.random.Generator,
    device: torch.device,
    calls: tuple[int, ...] = (0,),
) -> Rows:
    """For each of `calls`, ROW_HEADS (batch, head) pairs of a [B, H, S, D] output and
    ROWS_PER_HEAD positions in each, drawn from `rng` (the harness's, never the worker's).
    One copy to the device for all: three a pick held the host for each (a graph sample
    reads four calls' rows)."""
    batches, heads, seq = shape[0], shape[1], shape[2]
    pairs = rng.integers(0, batches * heads, (len(calls), ROW_HEADS)).reshape(-1)
    positions = rng.integers(0, seq, (len(calls), ROW_HEADS, ROWS_PER_HEAD)).reshape(-1)
    columns = np.stack(
        [
            np.repeat(np.asarray(calls), ROWS_PER_PICK),
            np.repeat(pairs // heads, ROWS_PER_HEAD),
            np.repeat(pairs % heads, ROWS_PER_HEAD),
            positions,
        ]
    )
    return Rows(*torch.as_tensor(columns, dtype=torch.long, device=device))


def gatherer(outs: list[torch.Tensor], rows: Rows) -> Callable[[], list[torch.Tensor]]:
    """What reads each pick's rows of its call's output (`outs`, one [B, H, S, D] a pick,
    in order), (ROWS_PER_PICK, D) each, into tensors the harness keeps. The picks' index
    views are made now, before the call is done: the read itself, inside the harness's
    bracket after the call's end, is the gathers alone."""
    reads = [(out, rows.of_pick(i)) for i, out in enumerate(outs)]
    return lambda: [out[index] for out, index in reads]


def query_rows(queries: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Every pick's query rows, (picks x ROWS_PER_PICK, D), from the harness's query
    buffers stacked ([calls, B, H, S, D]: the rows' `call` indexes them): one gather, so
    that the next sample may overwrite the buffers before these rows are checked."""
    return queries[rows.call, rows.batch, rows.head, rows.position]


def reference(
    q_rows: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: Rows,
    causal: bool,
    heads: int,
    descales: tuple[float, float, float] | None = None,
):
    """The float64 reference of every pick's rows, (picks x ROWS_PER_PICK, D), from their
    queries (`query_rows`) and the harness's own k and v; `heads` is the query's head
    count. All picks' heads in one batch (a loop over heads, or over a graph sample's
    picks, launched that many times the kernels); FP8 ones with their (q, k, v)
    `descales`, read as the values they stand for (the scores scaled by q's and k's, the
    output by v's: no dequantized copy of the whole inputs)."""
    group = heads // k.shape[1]
    scale, out_scale = None, 1.0
    if descales is not None:
        scale = descales[0] * descales[1] / math.sqrt(q_rows.shape[-1])
        out_scale = descales[2]
    picked = rows.batch.numel() // ROWS_PER_HEAD  # the picks' heads (shape only: no sync)
    batch = rows.batch.view(picked, ROWS_PER_HEAD)[:, 0]
    kv_head = rows.head.view(picked, ROWS_PER_HEAD)[:, 0] // group
    position = rows.position.view(picked, ROWS_PER_HEAD)
    q_rows = q_rows.view(picked, ROWS_PER_HEAD, -1)
    expected = reference_rows(q_rows, k[batch, kv_head], v[batch, kv_head], position, causal, scale)
    expected = expected.reshape(picked * ROWS_PER_HEAD, -1)
    return expected if descales is None else expected * out_scale


def problems(
    gathered: list[torch.Tensor], expected: torch.Tensor, tolerance: float
) -> list[tuple[str | None, float]]:
    """(why the rows fail the gate's tolerance or None, their max error) of each pick's
    gathered rows against its part of `expected` (`reference`'s), all picks' figures
    computed at once and read from the device in one read (a read a pick, three each,
    held the host for every pick of every sample)."""
    figures = _figures(torch.cat(gathered), expected, len(gathered)).tolist()
    return [_verdict(int(nonfinite), error, tolerance) for nonfinite, error in figures]


@dataclass(frozen=True)
class PickVerdict:
    """One pick's check: the sample it was read in, which of the sample's calls, why its
    rows fail (None: they pass) and their max error."""

    sample: int
    call: int
    problem: str | None
    error: float


class Unchecked:
    """A placement's samples whose rows were read but not yet checked: their picks, the
    rows read and the queries those rows need, kept until `verdicts` references them all
    in one batch (the module's docstring says why)."""

    def __init__(self, keys_per_head: int) -> None:
        self._keys_per_head = keys_per_head  # S x D: what each picked head's reference holds
        self._clear()

    def _clear(self) -> None:
        self._picks: list[tuple[int, int]] = []  # (sample, call), pick after pick
        self._rows: list[Rows] = []
        self._queries: list[torch.Tensor] = []
        self._gathered: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self._picks)

    def add(
        self,
        sample: int,
        calls: tuple[int, ...],
        rows: Rows,
        q_rows: torch.Tensor,
        gathered: list[torch.Tensor],
    ) -> None:
        self._picks += [(sample, call) for call in calls]
        self._rows.append(rows)
        self._queries.append(q_rows)
        self._gathered += gathered

    @property
    def full(self) -> bool:
        """Whether the kept heads' keys have reached REFERENCE_KEYS_MAX (a batch holds at
        most one sample's more: 4 heads, 16 for a graph sample's picks)."""
        return len(self._picks) * ROW_HEADS * self._keys_per_head >= REFERENCE_KEYS_MAX

    def verdicts(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        heads: int,
        tolerance: float,
        descales: tuple[float, float, float] | None = None,
    ) -> list[PickVerdict]:
        """Every kept pick's verdict, in the order read (one reference, one read from the
        device); nothing is kept afterwards."""
        if not self._picks:
            return []
        rows = Rows(*(torch.cat([getattr(r, f.name) for r in self._rows]) for f in fields(Rows)))
        expected = reference(torch.cat(self._queries), k, v, rows, causal, heads, descales)
        found = problems(self._gathered, expected, tolerance)
        picks = self._picks
        self._clear()
        return [
            PickVerdict(sample, call, problem, error)
            for (sample, call), (problem, error) in zip(picks, found, strict=True)
        ]


def _figures(got: torch.Tensor, want: torch.Tensor, picks: int) -> torch.Tensor:
    """(elements non-finite where the reference is finite, max abs error) of each of the
    `picks` equal parts of `got`, (picks, 2) in float64 on the device (correctness.errors'
    figures, no host read). A NaN left in the difference makes the error NaN: never a
    pass."""
    got, want = got.view(picks, -1), want.view(picks, -1)
    nonfinite = (~torch.isfinite(got) & torch.isfinite(want)).sum(dim=1).to(torch.float64)
    error = (got.to(torch.float64) - want).abs().amax(dim=1)
    return torch.stack([nonfinite, error], dim=1)


def _verdict(nonfinite: int, max_error: float, tolerance: float) -> tuple[str | None, float]:
    if nonfinite:
        return f"{nonfinite} non-finite elements in the rows checked", max_error
    if not max_error <= tolerance:
        return (
            f"max error {max_error:.3g} over tolerance {tolerance:.3g} in the rows checked",
            max_error,
        )
    return None, max_error
