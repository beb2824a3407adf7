"""softmax(q kᵀ · scale) v, computed in float32 whatever the inputs' dtype."""

from __future__ import annotations

import torch


def attention(q, k, v, *, causal: bool, scale: float) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, head_dim]; returns o of q's shape and dtype."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        # Bottom-right aligned, as SDPA's is_causal when the query is the key's tail.
        s_q, s_k = q.shape[-2], k.shape[-2]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
