"""The percentile bootstrap of a median and Student's t quantiles: one home for the VM's
summaries (benches.stats) and the controller's run-to-run comparison (bench report), which
must draw intervals alike.

numpy is imported here, not by `results_schema` itself: importing the schema stays cheap.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


def percentile_tails(confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The lower and upper percentiles (0-100) of a two-sided interval."""
    tail = (1.0 - confidence) / 2 * 100
    return tail, 100 - tail


def bootstrap_median_ci(
    values: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median, values i.i.d. It never leaves the
    values' range: a resample's median lies between their least and greatest."""
    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    low, high = np.percentile(medians, percentile_tails(confidence))
    return float(low), float(high)


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with a whole number of degrees of freedom, in closed form
    (Abramowitz & Stegun 26.7.3-4: finite sums in θ = atan(t/√df))."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: (2/π)(θ + sinθ (cosθ + 2/3 cos³θ + ...))
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + math.sin(theta) * total)
    else:  # even: sinθ (1 + 1/2 cos²θ + (1·3)/(2·4) cos⁴θ + ...)
        term, total = 1.0, 0.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = math.sin(theta) * total
    return 0.5 + math.copysign(inside / 2, t)


# Kept per (p, df): a summary asks for the same few (its confidence, its placements) at
# every row and look, and each answer is ~110 evaluations of student_t_cdf (the suite's
# pytest workers: 9188 calls, 0.8 s of CPU before, issue 52).
@functools.lru_cache(maxsize=256)
def student_t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (0.5 <= p < 1), by bisection on student_t_cdf."""
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2
