"""The null call a bracket is calibrated with (benches/bracket.py): run in a worker of the
harness's own, through the same requests as a kernel's, it returns a kept tensor of the
output's shape. On the GPU it launches one one-element kernel: what makes the GPU switch to
the worker's context and back, the larger part of what a bracket adds (about 0.28 ms of
0.33 on an H200, 2026-11-29: a worker that launched nothing was bracketed in 0.05 ms)."""

from __future__ import annotations

import torch

_kept: dict[tuple, torch.Tensor] = {}


def attention(q, k, v, *, causal, scale):
    key = (tuple(q.shape), q.dtype, q.device)
    out = _kept.get(key)
    if out is None:
        out = _kept[key] = torch.zeros_like(q)
    if q.is_cuda:
        out.view(-1)[:1].zero_()
    return out
