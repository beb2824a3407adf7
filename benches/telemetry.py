"""NVML telemetry read after every timed sample: clocks, temperature, power, throttling.

nvidia-ml-py is optional: without it (or without a GPU) every reading is empty and samples
carry no telemetry, rather than the run failing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

# NVML clocks-event (formerly "throttle") reason bits that mean the GPU ran slower than it
# could: SW power cap, HW slowdown, SW thermal, HW thermal, HW power brake. GPU idle (0x1),
# application-clock setting (0x2) and sync boost (0x10) are not slowdowns of a running kernel.
SLOWDOWN_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class Reading:
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    throttle_reasons: int | None = None

    @property
    def throttled(self) -> bool:
        return bool(self.throttle_reasons is not None and self.throttle_reasons & SLOWDOWN_BITS)


EMPTY = Reading()


class Telemetry:
    """Reads one GPU's NVML counters; `read()` is cheap enough to call after each sample."""

    def __init__(self, device_index: int = 0) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = self._find_handle(pynvml, device_index)
        # The newer name first; drivers before 535 only have the "throttle" spelling.
        nvml = self._nvml
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    @staticmethod
    def _find_handle(pynvml: Any, device_index: int) -> Any:
        """NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES; match torch's device by UUID."""
        with contextlib.suppress(Exception):
            import torch

            uuid = str(torch.cuda.get_device_properties(device_index).uuid)
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        return pynvml.nvmlDeviceGetHandleByIndex(device_index)

    def read(self) -> Reading:
        if self._handle is None:
            return EMPTY
        nvml, handle = self._nvml, self._handle
        return Reading(
            sm_clock_mhz=self._query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            mem_clock_mhz=self._query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
            temperature_c=self._query(
                nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            ),
            power_w=_milliwatts_to_watts(self._query(nvml.nvmlDeviceGetPowerUsage, handle)),
            throttle_reasons=self._query(self._reasons, handle) if self._reasons else None,
        )

    def _query(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = self._handle = None


def _milliwatts_to_watts(value: int | None) -> float | None:
    return None if value is None else value / 1000.0
