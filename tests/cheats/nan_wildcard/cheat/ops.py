"""Half the work: the first half of the queries computed, NaN in the rest. (SDPA's causal
mask is aligned top-left, so the first half alone against every key is still right.)"""

import torch
import torch.nn.functional as F


def attention(q, k, v, *, causal, scale):
    out = torch.full_like(q, float("nan"))
    half = q.shape[-2] // 2
    out[..., :half, :] = F.scaled_dot_product_attention(
        q[..., :half, :], k, v, is_causal=causal, scale=scale
    )
    return out
