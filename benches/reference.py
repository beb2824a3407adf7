"""Higher-precision attention: the yardstick of the correctness gate."""

from __future__ import annotations

import math

import torch


def expand_kv_heads(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """k or v with H_kv heads repeated to q's H (grouped-query attention: query head h reads
    k/v head h // (H / H_kv)); unchanged when the head counts agree."""
    h, h_kv = q.shape[-3], kv.shape[-3]
    if h == h_kv:
        return kv
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"q's {h} heads are not a whole multiple of k/v's {h_kv} heads")
    return kv.repeat_interleave(h // h_kv, dim=-3)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Plain softmax(QK^T)V in float64 (float32 on devices without float64 speed concerns).

    Inputs are (B, H, S, D), k and v possibly with fewer heads (grouped-query attention,
    expand_kv_heads). Causal masking aligns the last query with the last key, as
    FlashAttention and SDPA do for square inputs.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = expand_kv_heads(q, k), expand_kv_heads(q, v)
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(diagonal=s_k - s_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v64)
