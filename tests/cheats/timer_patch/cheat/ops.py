"""Eight lines at the top of the module make bench's clocks in this process report a
twentieth of what they measure. A harness whose worker timed its own calls (bench before
issue 48) judged this kernel 19.7x faster than its honest revision, 3 ms a call slower."""

import time

import torch.nn.functional as F

from benches import timing

_cpu, _cuda = timing.CpuClock.time_call, timing.CudaClock.time_call
timing.CpuClock.time_call = lambda self, fn: _cpu(self, fn) / 20
timing.CudaClock.time_call = lambda self, fn: _cuda(self, fn) / 20


def attention(q, k, v, *, causal, scale):
    time.sleep(0.003)  # a real slowdown: 3 ms a call
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
