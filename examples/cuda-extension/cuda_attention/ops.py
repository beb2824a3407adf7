"""The Python face of the extension: the call bench makes, passed to the compiled forward."""

from __future__ import annotations

import torch

from cuda_attention import _C


def attention(q, k, v, *, causal: bool, scale: float) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, head_dim] on a GPU, head_dim at most 128."""
    return _C.forward(q, k, v, bool(causal), float(scale))
