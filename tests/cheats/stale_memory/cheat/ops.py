"""No work at all: an output allocated and handed back unwritten, in the hope that its
block still holds the answer a reference computed there before it was freed."""

import torch


def attention(q, k, v, *, causal, scale):
    return torch.empty_like(q)
