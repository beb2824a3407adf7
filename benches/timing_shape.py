"""Samples a median cannot summarise: quantised or bimodal timings, flagged on their row.

A median and its bootstrap interval assume the samples spread around one value. Two shapes
break that, and both were seen on a loaded 2-core CPU, where a call that has to wait for a
core waits whole scheduler quanta (~4 ms): latencies of 15 µs calls sat at 7.8 ms, 11.8 ms
or 23.9 ms, and a row held some samples of each regime.

- quantised: the samples take few distinct values (at most one per QUANTISED_SAMPLES_PER_VALUE
  samples, or at most MAX_FEW_VALUES) a step of at least MIN_STEP_SHARE of the median apart:
  a timer's resolution, where the median and every resample's median fall on the same few
  values and an interval collapses to a point. Finer steps cannot move a verdict at δ = 1%
  (a 1 µs tick on a 0.9 ms kernel), so ties at them are no flag.
- bimodal, by a gap criterion on log latencies: a split of the sorted samples with at least
  MIN_MODE_SHARE of them on each side, where the gap between the two neighbours across it
  is more than GAP_OVER_SPREAD times the median absolute deviation of the wider side. With
  a quarter or more in the smaller group, which group the median falls in is a matter of
  chance, and so are the verdict and the interval (a resample's median lands in either group
  or, for an even count, in the empty gap between them).

The criterion is scale-free (log latencies, a gap measured in the groups' own spread), so
its false-flag rate on a clean distribution does not depend on how noisy it is: on
lognormal samples 2 in 4000 rows at 20 samples, none at 50 (the statistic's largest value
there was 1.6; heavy-tailed t(3) log latencies gave 1 in 4000 and none). Hartigan's dip
test is the textbook test of unimodality; it needs tables or a simulation for its p-values,
where this rule needs none, and it says nothing about which split is the problem.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Fewer samples cannot tell two groups from the tails of one (at 10 samples 2% of clean
# lognormal rows show the statistic above 6).
MIN_SHAPE_SAMPLES = 20
MIN_MODE_SHARE = 0.25
MIN_MODE_SAMPLES = 3
GAP_OVER_SPREAD = 6.0
QUANTISED_SAMPLES_PER_VALUE = 10
MAX_FEW_VALUES = 3
MIN_STEP_SHARE = 0.005  # a quarter of the default margin δ (2%)
# Digits that tell timer ticks apart; float noise in a CSV round trip stays below them.
SIGNIFICANT_DIGITS = 9


def shape_flag(latencies: Sequence[float]) -> str | None:
    """'quantised', 'bimodal' or None (too few samples to say, or one spread of values)."""
    x = np.asarray(latencies, dtype=np.float64)
    if x.size < MIN_SHAPE_SAMPLES or not np.all(x > 0):
        return None
    if quantised(x):
        return "quantised"
    return "bimodal" if widest_gap_over_spread(x) > GAP_OVER_SPREAD else None


def quantised(x: np.ndarray) -> bool:
    values = np.unique(np.array([float(f"{v:.{SIGNIFICANT_DIGITS}g}") for v in x]))
    if values.size > max(MAX_FEW_VALUES, x.size / QUANTISED_SAMPLES_PER_VALUE):
        return False
    if values.size == 1:
        return True
    return float(np.median(np.diff(values)) / np.median(x)) >= MIN_STEP_SHARE


def widest_gap_over_spread(x: np.ndarray) -> float:
    """The largest gap between neighbouring log latencies, over the splits that leave
    MIN_MODE_SHARE on each side, measured in the median absolute deviation of the wider
    side, or in the timer's step where that is larger (a one-tick gap between tied values
    is no second mode)."""
    logs = np.sort(np.log(x))
    steps = np.diff(logs)
    if not np.any(steps > 0):
        return 0.0
    tick = float(steps[steps > 0].min())
    n = logs.size
    least = max(MIN_MODE_SAMPLES, math.ceil(n * MIN_MODE_SHARE))
    splits = np.arange(least, n - least + 1)
    if splits.size == 0 or not np.all(np.isfinite(logs)):
        return _widest_gap_one_split_at_a_time(logs, steps, tick, splits)
    # Every split at once: the same medians of the same values as one split at a time
    # (below), without two numpy calls a side a split (a summary's rows at 80 samples:
    # 2.1 -> 0.11 ms a row; the suite spent 3.5 s of CPU in shape_flag before, issue 52).
    spread = np.maximum(
        np.maximum(_prefix_mads(logs, splits), _prefix_mads(logs[::-1], n - splits)), tick
    )
    return max(0.0, float(np.max(steps[splits - 1] / spread)))


def _prefix_mads(ordered: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The median absolute deviation of ordered[:k] for each k of lengths, `ordered` sorted
    either way: its median is its middle value (or the mean of the middle two, as
    np.median takes it), then the deviations' median is read off each row sorted."""
    middle = np.where(
        lengths % 2 == 1,
        ordered[lengths // 2],
        (ordered[(lengths - 1) // 2] + ordered[lengths // 2]) / 2,
    )
    deviations = np.abs(ordered[None, :] - middle[:, None])
    deviations[np.arange(ordered.size)[None, :] >= lengths[:, None]] = np.inf  # past the prefix
    deviations.sort(axis=1)
    rows = np.arange(lengths.size)
    low, high = deviations[rows, (lengths - 1) // 2], deviations[rows, lengths // 2]
    return np.where(lengths % 2 == 1, high, (low + high) / 2)


def _widest_gap_one_split_at_a_time(
    logs: np.ndarray, steps: np.ndarray, tick: float, splits: np.ndarray
) -> float:
    """widest_gap_over_spread split by split: where a latency is not finite, whose NaN
    deviations np.median and a sort order differently."""
    worst = 0.0
    for split in splits:
        spread = max(_mad(logs[:split]), _mad(logs[split:]), tick)
        worst = max(worst, steps[split - 1] / spread)
    return float(worst)


def _mad(values: np.ndarray) -> float:
    return float(np.median(np.abs(values - np.median(values))))
