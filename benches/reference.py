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


def _reference_scores(q, k, causal: bool, scale: float | None) -> torch.Tensor:
    """Q K^T * scale in float64, keys a query may not see at -inf."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k = expand_kv_heads(q, k)
    scores = torch.matmul(q.to(torch.float64), k.to(torch.float64).transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(diagonal=s_k - s_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Plain softmax(QK^T)V in float64 (float32 on devices without float64 speed concerns).

    Inputs are (B, H, S, D), k and v possibly with fewer heads (grouped-query attention,
    expand_kv_heads). Causal masking aligns the last query with the last key, as
    FlashAttention and SDPA do for square inputs.
    """
    scores = _reference_scores(q, k, causal, scale)
    return torch.matmul(torch.softmax(scores, dim=-1), expand_kv_heads(q, v).to(torch.float64))


def reference_rows(
    q_rows: torch.Tensor,
    k_head: torch.Tensor,
    v_head: torch.Tensor,
    positions: torch.Tensor,
    causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Rows of `reference_attention` for one head, or for a batch of heads at once:
    `q_rows` (..., R, D) are the queries at `positions` (..., R) of a q as long as the
    keys, `k_head` and `v_head` (..., S, D) those heads' keys and values; the same float64
    arithmetic, a query seeing the keys up to its own position when causal."""
    scale = 1.0 / math.sqrt(q_rows.shape[-1]) if scale is None else scale
    keys = k_head.to(torch.float64).transpose(-1, -2)
    scores = torch.matmul(q_rows.to(torch.float64), keys) * scale
    if causal:
        key_positions = torch.arange(k_head.shape[-2], device=q_rows.device)
        scores = scores.masked_fill(key_positions > positions[..., None], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v_head.to(torch.float64))


def reference_lse(
    q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Each query row's natural-log log-sum-exp of its scaled scores, in float64 (the lse a
    FlashAttention forward returns beside its output)."""
    return torch.logsumexp(_reference_scores(q, k, causal, scale), dim=-1)
