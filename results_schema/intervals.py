"""The percentile bootstrap of a median: one home for the VM's summaries (benches.stats) and
the controller's run-to-run comparison (bench report), which must draw intervals alike.

numpy is imported here, not by `results_schema` itself: importing the schema stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


def percentile_tails(confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The lower and upper percentiles (0-100) of a two-sided interval."""
    tail = (1.0 - confidence) / 2 * 100
    return tail, 100 - tail


def bootstrap_median_ci(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (CONFIDENCE level), values i.i.d."""
    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    low, high = np.percentile(medians, percentile_tails())
    return float(low), float(high)
