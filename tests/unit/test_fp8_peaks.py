"""An FP8 result is held to its GPU's dense FP8 peak: gpu_kinds.json carries the datasheets'
FP8 figures for the Ada and Hopper kinds, a summary row's % of peak and the `impossible`
flag read the peak of the config's dtype, and a share past NEAR_PEAK_PERCENT is marked."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from benches.stats import attention_bytes, summarize
from results_schema import AttentionConfig, Measurement, Plan
from results_schema.gpu_kinds import DensePeaks, kind, kind_of, near_peak
from results_schema.models import EnvironmentFingerprint


@pytest.mark.parametrize(
    "smi_name, sixteen, fp8",
    [
        ("NVIDIA L4", 121.0, 242.5),
        ("NVIDIA H100 80GB HBM3", 989.0, 1979.0),
        ("NVIDIA H100 PCIe", 756.0, 1513.0),
        ("NVIDIA H200", 989.0, 1979.0),
        ("NVIDIA A100-SXM4-40GB", 312.0, None),  # no FP8 tensor cores
    ],
)
def test_each_kind_holds_fp8_to_its_dense_fp8_peak(smi_name, sixteen, fp8):
    gpu = kind_of(smi_name)
    assert gpu.peak_for("bfloat16") == gpu.peak_for("float16") == sixteen
    assert gpu.peak_for("float8_e4m3fn") == fp8
    assert gpu.peak_for("float32") is None
    if fp8 is not None:  # the dense figure is half the datasheet's with-sparsity one
        assert "sparsity" in gpu.fp8_peak_tflops_source and "dense" in gpu.fp8_peak_tflops_source


def test_the_fingerprint_carries_both_peaks():
    env = EnvironmentFingerprint(peak_tflops=989.0, fp8_peak_tflops=1979.0)
    assert env.dense_peaks() == DensePeaks(989.0, 1979.0)
    assert kind("h200").fp8_peak_tflops == 1979.0


def _plan(dtype: str) -> Plan:
    config = AttentionConfig(
        name="c", batch=1, heads=2, seq_len=128, head_dim=64, dtype=dtype, causal=False
    )
    return Plan(
        name="t",
        description="",
        device="cpu",
        candidate="a",
        compared_with=["b"],
        reference="reference",
        samples_per_config=3,
        configs=[config],
    )


def _rows(times: dict[str, float]) -> list[Measurement]:
    now = datetime.now(timezone.utc)
    return [
        Measurement(
            run_id="r",
            config="c",
            implementation=impl,
            mode="single",
            round=r,
            placement=0,
            calls=1,
            latency_ms=ms,
            timestamp=now,
        )
        for r in range(3)
        for impl, ms in times.items()
    ]


def test_an_fp8_row_is_a_share_of_the_fp8_peak_and_past_it_impossible():
    # 4*1*2*128*128*64 FLOPs = 8.4 MFLOP: 8.4 TFLOP/s at 1 µs, 4.2 at 2 µs
    rows = _rows({"a": 0.001, "b": 0.002})
    peaks = DensePeaks(sixteen_bit=5.0, fp8=9.0)
    fp8 = {s.implementation: s for s in summarize("r", _plan("float8_e4m3fn"), rows, {}, peaks)}
    assert fp8["a"].flag is None and fp8["b"].flag is None  # under the FP8 peak
    assert fp8["a"].pct_of_peak == pytest.approx(100 * fp8["a"].tflops / 9.0)
    assert near_peak(fp8["a"].pct_of_peak) and not near_peak(fp8["b"].pct_of_peak)
    bf16 = {s.implementation: s for s in summarize("r", _plan("bfloat16"), rows, {}, peaks)}
    assert bf16["a"].flag == "impossible"  # the same time over the 16-bit peak
    over = summarize("r", _plan("float8_e4m3fn"), rows, {}, DensePeaks(5.0, 8.0))
    assert [s.flag for s in over] == ["impossible", None]


def test_an_fp8_config_moves_one_byte_an_input_element_and_two_an_output_element():
    config = _plan("float8_e4m3fn").configs[0]
    per_head = 128 * 64
    assert attention_bytes(config) == (2 + 2 + 2) * per_head + 2 * 2 * per_head
