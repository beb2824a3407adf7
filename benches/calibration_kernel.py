"""The known call a bracket is calibrated with (benches/bracket.py), run in a worker of the
harness's own through the same requests as a kernel's: torch's SDPA on the sample's inputs.

GPU: the parent times the same SDPA in its own process with its own events
(timing.CudaClock); what the bracket adds is the difference of the two medians. A known
kernel, not a null one: a bracket around a one-element kernel read 0.26-0.30 ms less, per
sample, than one around a real kernel less that kernel's own time (our kernel and SDPA,
every config of the default plan on an H200, 2026-11-29), the GPU's switches to and from a
context that runs real work costing more than to one that barely does. CPU: the bracket less
the worker's own time for the call (brackets.CpuBracket.overhead_of says why not a call
that does nothing).
"""

from __future__ import annotations

import torch.nn.functional as F


def attention(q, k, v, *, causal, scale):
    gqa = {"enable_gqa": True} if k.shape[-3] != q.shape[-3] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)
