"""PyTorch's SDPA and nothing else."""

import torch.nn.functional as F


def attention(q, k, v, *, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
