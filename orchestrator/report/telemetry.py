"""The GPU's clocks, power and temperature per round, from what NVML read after each timed
sample (measurements.csv, benches/telemetry.py): what a report shows beside the times, so
that a slow round can be told from a throttled one.

A round times each identity once; its row here spans what NVML read after each of those
samples. A CPU run has no readings, and no rounds here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from results_schema import EnvironmentFingerprint, Measurement


@dataclass(frozen=True)
class RoundTelemetry:
    """One round of one config: the lowest and highest of each reading over its samples
    (None where NVML gave none), and how many samples ran throttled (power or thermal)."""

    config: str
    round: int
    placement: int
    samples: int
    sm_clock_mhz: tuple[int, int] | None
    mem_clock_mhz: tuple[int, int] | None
    power_w: tuple[float, float] | None
    temperature_c: tuple[int, int] | None
    throttled_samples: int


# measurements.csv's readings, as RoundTelemetry names them too.
_READINGS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")


@dataclass
class _Round:
    placement: int
    samples: int = 0
    throttled: int = 0
    spans: dict[str, tuple] = field(default_factory=dict)

    def add(self, m: Measurement) -> None:
        self.samples += 1
        self.throttled += int(m.throttled)
        for name in _READINGS:
            value = getattr(m, name)
            if value is not None:
                low, high = self.spans.get(name, (value, value))
                self.spans[name] = (min(low, value), max(high, value))


class RoundCollector:
    """Gathers measurements.csv's readings round by round, one row at a time (the report
    reads the file once, for its times as well)."""

    def __init__(self) -> None:
        self._rounds: dict[tuple[str, int], _Round] = {}

    def add(self, m: Measurement) -> None:
        if m.throttle_reasons is None and all(getattr(m, n) is None for n in _READINGS):
            return  # no NVML here (a CPU run, a GPU without nvidia-ml-py)
        self._rounds.setdefault((m.config, m.round), _Round(m.placement)).add(m)

    def rounds(self) -> list[RoundTelemetry]:
        return [
            RoundTelemetry(
                config,
                round_index,
                held.placement,
                held.samples,
                *(held.spans.get(name) for name in _READINGS),
                held.throttled,
            )
            for (config, round_index), held in self._rounds.items()
        ]


def _span(spans: Iterable[tuple | None]) -> tuple | None:
    given = [s for s in spans if s is not None]
    if not given:
        return None
    return min(s[0] for s in given), max(s[1] for s in given)


def _range(span: tuple, unit: str) -> str:
    low, high = (f"{value:.0f}" for value in span)
    return f"{low} {unit}" if low == high else f"{low}–{high} {unit}"


# Each reading as the line names it, its unit, and the fingerprint's ceiling for it.
_SHOWN = (
    ("sm_clock_mhz", "SM clock", "MHz", "sm_clock_max_mhz", "max"),
    ("mem_clock_mhz", "memory", "MHz", "mem_clock_max_mhz", "max"),
    ("power_w", "power", "W", "power_limit_w", "limit"),
    ("temperature_c", "temperature", "°C", None, None),
)


def telemetry_line(
    rounds: list[RoundTelemetry], environment: EnvironmentFingerprint | None
) -> str | None:
    """One line over the run's rounds: each reading's range against its ceiling (the
    environment fingerprint's), and how many rounds had a throttled sample; None without
    readings."""
    if not rounds:
        return None
    env = environment or EnvironmentFingerprint()
    parts = []
    for reading, label, unit, ceiling_field, ceiling_word in _SHOWN:
        span = _span(getattr(r, reading) for r in rounds)
        if span is None:
            continue
        ceiling = getattr(env, ceiling_field) if ceiling_field else None
        shown = f" ({ceiling_word} {ceiling:.0f} {unit})" if ceiling else ""
        parts.append(f"{label} {_range(span, unit)}{shown}")
    throttled = sum(r.throttled_samples > 0 for r in rounds)
    parts.append(f"{throttled} of {len(rounds)} rounds throttled (power or thermal)")
    return "GPU per round (NVML after each sample): " + ", ".join(parts)
