"""Every timed call of a worker's kernel checked where the harness reads it.

A kernel that runs in its own process could tell a timed call from a checked one and
answer garbage only while timed (a frame lookup does it). So the harness checks every
sample it times: before the call it writes fresh random queries into the worker's input
buffer, after it reads back rows of the output that it picks then — ROW_HEADS random
(batch, head) pairs, ROWS_PER_HEAD random positions in each — from where the output lies
(benches/bracket.py), and compares them with the float64 reference computed here from its
own copy of the inputs. A kernel does not know which rows will be read, nor the queries
before the call starts: a cached, stale, partial or lazy answer fails, as does one written
after the call reported done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from benches.reference import reference_rows

ROW_HEADS = 4
ROWS_PER_HEAD = 8


@dataclass(frozen=True)
class Rows:
    """Which output rows a sample's check reads: index tensors of one length."""

    batch: torch.Tensor
    head: torch.Tensor
    position: torch.Tensor
    # The (batch, head) of each ROWS_PER_HEAD rows, on the host: the reference reads a head
    # without a device sync to learn which (one per head per sample, each waiting for the
    # GPU's queue).
    heads: tuple[tuple[int, int], ...]


def pick(shape: tuple[int, ...], rng: np.random.Generator, device: torch.device) -> Rows:
    """ROW_HEADS (batch, head) pairs of a [B, H, S, D] output and ROWS_PER_HEAD positions
    in each, drawn from `rng` (the harness's, never the worker's)."""
    batches, heads, seq = shape[0], shape[1], shape[2]
    pairs = rng.integers(0, batches * heads, ROW_HEADS)
    positions = rng.integers(0, seq, (ROW_HEADS, ROWS_PER_HEAD))

    def long(values) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values).reshape(-1), dtype=torch.long, device=device)

    return Rows(
        long(np.repeat(pairs // heads, ROWS_PER_HEAD)),
        long(np.repeat(pairs % heads, ROWS_PER_HEAD)),
        long(positions),
        tuple((int(pair // heads), int(pair % heads)) for pair in pairs),
    )


def gather(out: torch.Tensor, rows: Rows) -> torch.Tensor:
    """The picked rows of `out` ([B, H, S, D]), (R, D), copied where the harness keeps them."""
    return out[rows.batch, rows.head, rows.position]


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: Rows,
    causal: bool,
    descales: tuple[float, float, float] | None = None,
):
    """The float64 reference of the picked rows, from the harness's own q, k and v, all
    ROW_HEADS heads in one batch (a loop over them launched 4x the kernels, a cost each
    sample of a worker's call pays); FP8 ones with their (q, k, v) `descales`, read as the
    values they stand for (the scores scaled by q's and k's, the output by v's: no
    dequantized copy of the whole inputs)."""
    group = q.shape[1] // k.shape[1]
    scale, out_scale = None, 1.0
    if descales is not None:
        scale = descales[0] * descales[1] / math.sqrt(q.shape[-1])
        out_scale = descales[2]
    heads = len(rows.heads)
    batch = rows.batch.view(heads, ROWS_PER_HEAD)[:, 0]
    kv_head = rows.head.view(heads, ROWS_PER_HEAD)[:, 0] // group
    position = rows.position.view(heads, ROWS_PER_HEAD)
    q_rows = q[rows.batch, rows.head, rows.position].view(heads, ROWS_PER_HEAD, -1)
    expected = reference_rows(q_rows, k[batch, kv_head], v[batch, kv_head], position, causal, scale)
    expected = expected.reshape(heads * ROWS_PER_HEAD, -1)
    return expected if descales is None else expected * out_scale


def problems(
    gathered: list[torch.Tensor], expected: list[torch.Tensor], tolerance: float
) -> list[tuple[str | None, float]]:
    """(why the rows fail the gate's tolerance or None, their max error) of each pair of
    gathered and expected rows, read from the device at once (a read a pair, three
    each, held the host for every pick of every sample)."""
    figures = torch.stack(
        [_figures(got, want) for got, want in zip(gathered, expected, strict=True)]
    ).tolist()
    return [_verdict(int(nonfinite), error, tolerance) for nonfinite, error in figures]


def _figures(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """(elements non-finite where the reference is finite, max abs error) of `got`, in
    float64 on the device (correctness.errors' figures, no host read). A NaN left in the
    difference makes the error NaN: never a pass."""
    nonfinite = (~torch.isfinite(got) & torch.isfinite(want)).sum().to(torch.float64)
    return torch.stack([nonfinite, (got.to(torch.float64) - want).abs().max()])


def _verdict(nonfinite: int, max_error: float, tolerance: float) -> tuple[str | None, float]:
    if nonfinite:
        return f"{nonfinite} non-finite elements in the rows checked", max_error
    if not max_error <= tolerance:
        return (
            f"max error {max_error:.3g} over tolerance {tolerance:.3g} in the rows checked",
            max_error,
        )
    return None, max_error
