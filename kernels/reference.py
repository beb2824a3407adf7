"""Higher-precision attention: the yardstick of the correctness gate."""

from __future__ import annotations

import math

import torch


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Plain softmax(QK^T)V in float64 (float32 on devices without float64 speed concerns).

    Inputs are (B, H, S, D). Causal masking aligns the last query with the last key, as
    FlashAttention and SDPA do for square inputs.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(diagonal=s_k - s_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v64)
