"""The FP8 (e4m3) forward on an sm_90 GPU against float64 attention on the dequantized inputs.

The tolerance is the error FP8 itself brings: an emulated reference in torch (the same
float64 scores, P = exp(s - max) * 2^8 rounded to e4m3 as the kernel rounds it, O divided by
the unrounded sums) is measured against float64 on the same inputs, and the kernel may be off by
twice that plus bf16's rounding of the output (kernels/flash_attention/NOTES.md, f1). Outputs
are poisoned with NaN first; NaN never passes.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="the FP8 kernel runs on sm_90 only",
    ),
]

E4M3 = torch.float8_e4m3fn
# A measurement build's switches (csrc/switches.h), e.g. "FLASH_FP8_LAZY_RESCALE=2": this module
# then checks that build (test_flash_correctness.py's variable).
SWITCHES_ENV = "FLASH_TEST_SWITCHES"


@pytest.fixture(scope="module", autouse=True)
def library_under_test():
    from kernels.flash_attention import build, load_library

    return load_library(defines=build.parse_defines(os.environ.get(SWITCHES_ENV, "").split()))


def quantize(x):
    descale = (x.abs().amax().float() / 448.0).clamp(min=1e-12)
    return (x / descale).clamp(-448, 448).to(E4M3), descale.reshape(1)


def references(q8, k8, v8, descales, causal, scale):
    qd, kd, vd = (t.double() * d.double() for t, d in zip((q8, k8, v8), descales, strict=True))
    group = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = qd @ kd.transpose(-1, -2) * scale
    if causal:
        s_q, s_k = s.shape[-2:]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=s.device).tril(s_k - s_q)
        s = s.masked_fill(~keep, -math.inf)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    p8 = (e * 256.0).float().to(E4M3).double() / 256.0
    return e @ vd / total, p8 @ vd / total, (m + total.log()).squeeze(-1)


# (batch, q heads, k/v heads, keys). 16500: past 16384, where D = 128 takes its 224-key tiles
# causal and not (flash_fwd_sm90_fp8.cuh, fp8_wide), on a multiple of neither tile.
SHAPES = [(2, 4, 4, 512), (1, 4, 2, 1000), (1, 2, 2, 97), (1, 2, 1, 16500)]


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_fp8_matches_float64_within_the_emulated_fp8_error(head_dim, causal, shape):
    from kernels.flash_attention import flash_attention_with_lse

    b, hq, hkv, s = shape
    torch.manual_seed(0)
    q8, dq = quantize(torch.randn(b, hq, s, head_dim, device="cuda"))
    k8, dk = quantize(torch.randn(b, hkv, s, head_dim, device="cuda"))
    v8, dv = quantize(torch.randn(b, hkv, s, head_dim, device="cuda"))
    poison = torch.full((b, hq, s, head_dim), float("nan"), dtype=torch.bfloat16, device="cuda")
    del poison
    out, lse = flash_attention_with_lse(
        q8, k8, v8, causal=causal, q_descale=dq, k_descale=dk, v_descale=dv
    )
    torch.cuda.synchronize()
    ref, emulated, ref_lse = references(q8, k8, v8, (dq, dk, dv), causal, head_dim**-0.5)
    assert out.dtype == torch.bfloat16 and out.shape == q8.shape
    assert torch.isfinite(out).all()
    bound = 2 * (emulated - ref).abs().max().item() + 2**-8
    assert (out.double() - ref).abs().max().item() <= bound
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_fp8_descales_as_numbers_equal_descales_as_tensors():
    from kernels.flash_attention import flash_attention

    q8, dq = quantize(torch.randn(1, 2, 256, 128, device="cuda"))
    a = flash_attention(q8, q8, q8, q_descale=dq, k_descale=dq, v_descale=dq)
    b = flash_attention(q8, q8, q8, q_descale=dq.item(), k_descale=dq.item(), v_descale=dq.item())
    assert torch.equal(a, b)


def test_fp8_refuses_a_non_positive_scale():
    from kernels.flash_attention import flash_attention

    q8, _ = quantize(torch.randn(1, 2, 64, 128, device="cuda"))
    with pytest.raises(ValueError, match="positive scale"):
        flash_attention(q8, q8, q8, scale=-0.1)


# csrc/flash_api.h FLASH_FP8_TILE_GRID: one block per tile, where the default grid is persistent.
TILE_GRID = 64


def test_fp8_persistent_grid_walks_more_tiles_than_sms_as_one_block_a_tile_would():
    """D = 128 non-causal below 4096 keys runs on a persistent grid (NOTES "f9"): 1024 tiles of
    128 query rows, more than four a block (the K/V ring's stages' parities carried from tile to
    tile), 2000 keys (ragged: 16 key tiles, the last of 80), grouped-query 32/8. Its output is
    the one-block-a-tile kernel's, bit for bit (the same math per tile), and within the FP8 error
    of float64."""
    from kernels.flash_attention import api

    b, hq, hkv, s, d = 2, 32, 8, 2000, 128
    assert b * hq * -(-s // 128) > 4 * torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(1)
    q8, dq = quantize(torch.randn(b, hq, s, d, device="cuda"))
    k8, dk = quantize(torch.randn(b, hkv, s, d, device="cuda"))
    v8, dv = quantize(torch.randn(b, hkv, s, d, device="cuda"))
    api.load_library()
    runs = {}
    for flags in (0, TILE_GRID):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out, lse = api._forward_fp8(q8, k8, v8, False, d**-0.5, [dq, dk, dv], flags=flags)
            torch.cuda.synchronize()
        kernels = {e.key for e in prof.key_averages() if "flash_fwd_fp8" in e.key}
        runs[flags] = (out, lse, kernels)
    (persistent, lse, kernels), (tiles, _, tile_kernels) = runs[0], runs[TILE_GRID]
    assert len(kernels) == 1 and kernels != tile_kernels, (kernels, tile_kernels)
    assert torch.equal(persistent, tiles)
    ref, emulated, ref_lse = references(q8, k8, v8, (dq, dk, dv), False, d**-0.5)
    bound = 2 * (emulated - ref).abs().max().item() + 2**-8
    assert (persistent.double() - ref).abs().max().item() <= bound
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3
