"""One row per GPU kind (gpu_kinds.json), read by the controller and the harness alike.

The controller's machine table (orchestrator/data/gpus.toml) names each machine's kind; the
harness finds the kind of the GPU it runs on by name (`kind_of`). Both take a kind's peak
from here and compute a share of it with `percent_of_peak`, so a sweep's figure and a run's
summary rows are one computation of one number. Stdlib only: the payload's python reads it
before anything else is installed, on Python 3.10 too (hence JSON, not TOML).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).with_name("gpu_kinds.json")
# The dtypes the peaks are for: dense 16-bit tensor-core rates, and dense e4m3 rates.
SIXTEEN_BIT = ("float16", "bfloat16")
EIGHT_BIT = ("float8_e4m3fn",)


@dataclass(frozen=True)
class GpuKind:
    key: str
    name_match: str  # words of the GPU's name as NVML and nvidia-smi give it
    arch: str  # the CUDA arch a kernel is built for (its compute capability)
    peak_tflops: float  # dense fp16/bf16 tensor-core peak
    peak_tflops_source: str
    bandwidth_gb_s: float  # peak memory bandwidth
    bandwidth_source: str
    fp8_peak_tflops: float | None = None  # dense e4m3 tensor-core peak; None: none known
    fp8_peak_tflops_source: str | None = None

    def peak_for(self, dtype: str) -> float | None:
        """The dense tensor-core peak of `dtype`'s inputs, or None where none is known."""
        return dense_peak(dtype, self.peak_tflops, self.fp8_peak_tflops)


@lru_cache(maxsize=1)
def gpu_kinds() -> tuple[GpuKind, ...]:
    """Every kind, in the table's order (more specific names first)."""
    rows = json.loads(TABLE.read_text(encoding="utf-8"))["kinds"]
    return tuple(GpuKind(**row) for row in rows)


def kind(key: str) -> GpuKind:
    """The kind of that key; KeyError when the table has none."""
    found = next((k for k in gpu_kinds() if k.key == key), None)
    if found is None:
        raise KeyError(f"no GPU kind {key!r} in {TABLE.name}")
    return found


def kind_of(gpu_name: str | None) -> GpuKind | None:
    """The first kind all of whose `name_match` words are words of `gpu_name` ("NVIDIA
    A100-SXM4-40GB" is an A100; "NVIDIA L40S" is no L4), or None."""
    if not gpu_name:
        return None
    words = set(_words(gpu_name))
    return next((k for k in gpu_kinds() if set(_words(k.name_match)) <= words), None)


# A figure past this share of its GPU's dense peak is checked twice before it is believed
# (KernelBench's guide says so of a kernel 10 % past cuDNN; issue 53): the report marks it.
NEAR_PEAK_PERCENT = 90.0


def near_peak(percent: float | None) -> bool:
    """Whether a share of peak (`percent_of_peak`) is past NEAR_PEAK_PERCENT."""
    return percent is not None and percent > NEAR_PEAK_PERCENT


def dense_peak(
    dtype: str, sixteen_bit_tflops: float | None, fp8_tflops: float | None
) -> float | None:
    """Which of a GPU's peaks a config of `dtype` is held to: the 16-bit one, the FP8 one,
    or none (32- and 64-bit inputs: the table holds no such rates)."""
    if dtype in SIXTEEN_BIT:
        return sixteen_bit_tflops
    if dtype in EIGHT_BIT:
        return fp8_tflops
    return None


@dataclass(frozen=True)
class DensePeaks:
    """A GPU's dense tensor-core peaks by input dtype (TFLOP/s; None where unknown)."""

    sixteen_bit: float | None
    fp8: float | None = None

    def for_dtype(self, dtype: str) -> float | None:
        return dense_peak(dtype, self.sixteen_bit, self.fp8)


def as_dense_peaks(peaks: DensePeaks | float | None) -> DensePeaks:
    """Peaks as given, or a bare number as the 16-bit peak alone."""
    return peaks if isinstance(peaks, DensePeaks) else DensePeaks(peaks)


def percent_of_peak(tflops: float | None, peak_tflops: float | None) -> float | None:
    """`tflops` as a percentage of a kind's peak for its dtype; None without either."""
    if tflops is None or not peak_tflops:
        return None
    return 100.0 * tflops / peak_tflops


def _words(text: str) -> list[str]:
    return [word for word in re.split(r"[^a-z0-9]+", text.lower()) if word]
