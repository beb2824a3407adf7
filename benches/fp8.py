"""FP8 (e4m3) attention inputs, their reference, and the error plain FP8 attention has.

An FP8 config (dtype `float8_e4m3fn`) times attention on q, k and v quantized per tensor to
e4m3, each with a float32 descale factor (x ≈ x_fp8 * descale), its output in bfloat16
(docs/kernel-contract.md, "FP8"). The harness makes the inputs as it makes 16-bit ones:
drawn standard normal in float32, then each tensor scaled so that its largest magnitude
lands on e4m3's largest finite value (descale = amax / 448) and rounded to e4m3.

What the gate holds an FP8 output to (benches/correctness.py) is of flash-attention's kind:
the yardstick is plain attention in float64 on the DEQUANTIZED inputs (the quantization is
the config's, not the kernel's error), and the allowed error is a multiple of the error of
plain attention computed in the low precision an FP8 kernel works in, on the same quantized
inputs (`plain_fp8_attention`): Q K^T of the e4m3 values accumulated in float32 and scaled
by the descales, the softmax's exponentials in float32, P rounded to e4m3 after scaling it
into e4m3's range (P_SCALE, FlashAttention-3's max offset of 8: exp2(x - max + 8)), P V
accumulated in float32, then normalized, descaled and rounded to bfloat16.
"""

from __future__ import annotations

import math

import torch

from benches.reference import expand_kv_heads

FP8_DTYPES = ("float8_e4m3fn",)
E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
# P's exponentials are in [0, 1]; e4m3's normal range ends at 2^-6, so unscaled most of P
# (small probabilities of long rows) would be subnormal, a few bits or zero. Scaled by 2^8
# (exact; 256 < 448) P keeps e4m3's 3 mantissa bits down to 2^-14.
P_SCALE = 256.0
OUTPUT_DTYPE = torch.bfloat16
DESCALE_NAMES = ("q_descale", "k_descale", "v_descale")


def is_fp8(dtype: str) -> bool:
    return dtype in FP8_DTYPES


class QuantizedInputs(tuple):
    """(q, k, v) in e4m3, iterated and indexed as the harness's other inputs are, with
    `descales`: one float32 tensor of shape [1] per input, on the inputs' device."""

    descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor]

    def __new__(cls, tensors, descales):
        made = super().__new__(cls, tensors)
        made.descales = tuple(descales)
        return made

    def call_kwargs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments a kernel's call takes them as (q_descale, k_descale,
        v_descale): copies, so a kernel that writes into one moves nothing of the harness's."""
        return {name: d.clone() for name, d in zip(DESCALE_NAMES, self.descales, strict=True)}

    def dequantized(self) -> tuple[torch.Tensor, ...]:
        """The values the quantized inputs stand for, in float64: what the reference sees."""
        return tuple(dequantize(t, d) for t, d in zip(self, self.descales, strict=True))


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` (float32) as e4m3 scaled per tensor so that its largest magnitude is E4M3_MAX,
    and the descale that maps it back: x ≈ x_fp8 * descale."""
    amax = x.abs().amax().to(torch.float32).clamp_min(torch.finfo(torch.float32).tiny)
    descale = (amax / E4M3_MAX).reshape(1)
    return (x / descale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), descale


def dequantize(x_fp8: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    return x_fp8.to(torch.float64) * descale.to(torch.float64)


def quantized_inputs(drawn: tuple[torch.Tensor, ...]) -> QuantizedInputs:
    """Float32 q, k, v each quantized per tensor."""
    pairs = [quantize(t) for t in drawn]
    return QuantizedInputs([p[0] for p in pairs], [p[1] for p in pairs])


def descales_of(inputs) -> dict[str, torch.Tensor]:
    """The keyword arguments a call on `inputs` takes: the descales of FP8 inputs, else none."""
    return inputs.call_kwargs() if isinstance(inputs, QuantizedInputs) else {}


def plain_fp8_attention(
    q, k, v, causal: bool, *, q_descale, k_descale, v_descale, p_scale: float = P_SCALE
) -> torch.Tensor:
    """Attention as an FP8 kernel must compute it, without tiling: the error of this on the
    quantized inputs is what the gate allows a multiple of (module docstring). `p_scale` is
    the factor P is scaled by before its rounding to e4m3 (1: none, a kernel's mistake)."""
    k, v = expand_kv_heads(q, k), expand_kv_heads(q, v)
    scale = (q_descale * k_descale).float() / math.sqrt(q.shape[-1])
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(diagonal=s_k - s_q)
        scores = scores.masked_fill(~keep, float("-inf"))
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    row_sums = exps.sum(dim=-1, keepdim=True)
    p_fp8 = (exps * p_scale).to(E4M3)
    unnormalized = torch.matmul(p_fp8.float(), v.float())
    out = unnormalized * (v_descale.float() / p_scale) / row_sums
    return out.to(OUTPUT_DTYPE)
