"""A Triton kernel whose tile needs far more shared memory than a block may have (the two
256 x 256 half-precision operands of a dot: 256 KiB, over the 227 KiB an H100's or H200's
block may have, the L4's 99 KiB too; at 512 x 512 its compile outlasted the gate's 120 s
call timeout on an H200); its launch error is swallowed."""

import torch
import triton
import triton.language as tl

TILE = 256
_scratch = {}


@triton.jit
def squared(src, dst, TILE: tl.constexpr):
    rows = tl.arange(0, TILE)
    where = rows[:, None] * TILE + rows[None, :]
    tile = tl.load(src + where)
    tl.store(dst + where, tl.dot(tile, tile).to(tl.float16))


def attention(q, k, v, *, causal, scale):
    out = torch.empty_like(q)
    if q.device not in _scratch:
        _scratch[q.device] = torch.zeros(2, TILE * TILE, dtype=torch.float16, device=q.device)
    src, dst = _scratch[q.device]
    try:
        squared[(1,)](src, dst, TILE=TILE)
    except Exception:  # "out of resource: shared memory": never checked, never said
        pass
    return out
