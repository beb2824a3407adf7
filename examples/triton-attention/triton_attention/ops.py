"""Attention forward in Triton: one program per (query block, batch × head), the keys
streamed in blocks with an online softmax (FlashAttention's recurrence), in float32."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# The tile, from the environment so that bench-kernel.toml's [kernel.variants] can select it
# (read once, at import: each variant has a worker process of its own).
BLOCK_M = int(os.environ.get("BLOCK_M", "64"))
BLOCK_N = int(os.environ.get("BLOCK_N", "64"))
LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2 e): exp2 is the cheaper instruction


@triton.jit
def _forward(
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, seq_q, seq_k,
    sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, so_b, so_h, so_s,
    HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // HEADS, bh % HEADS
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_s + dims[None, :],
        mask=rows[:, None] < seq_q,
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # Causal masks are bottom-right aligned: row r sees keys up to r + seq_k - seq_q.
    end = tl.minimum(seq_k, (block + 1) * BLOCK_M + seq_k - seq_q) if CAUSAL else seq_k
    for start in range(0, end, BLOCK_N):
        keys = start + cols
        k = tl.load(
            k_ptr + b * sk_b + h * sk_h + keys[None, :] * sk_s + dims[:, None],
            mask=keys[None, :] < seq_k,
            other=0.0,
        )
        scores = tl.dot(q, k) * qk_scale
        keep = keys[None, :] < seq_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + seq_k - seq_q)
        scores = tl.where(keep, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_ptr + b * sv_b + h * sv_h + keys[:, None] * sv_s + dims[None, :],
            mask=keys[:, None] < seq_k,
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        o_ptr + b * so_b + h * so_h + rows[:, None] * so_s + dims[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=rows[:, None] < seq_q,
    )


def attention(q, k, v, *, causal: bool, scale: float) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, head_dim] on a GPU, head_dim 64 or 128."""
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("the head dimension must be contiguous")
    batch, heads, seq_q, head_dim = q.shape
    out = torch.empty_like(q)
    grid = (triton.cdiv(seq_q, BLOCK_M), batch * heads)
    _forward[grid](
        q, k, v, out, scale * LOG2_E, seq_q, k.shape[-2],
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        HEADS=heads, HEAD_DIM=head_dim, CAUSAL=bool(causal), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        num_warps=4 if head_dim <= 64 else 8, num_stages=2,
    )  # fmt: skip
    return out
