"""The money rules no cloud owns: the most a launch may be given, the longest time cap,
a free run's cap, the monthly cap (DESIGN.md, "Budget and
time caps"). What a machine costs, and the cap a budget buys there, is its backend's
(`PricesRuns`, backends/base.py; Compute Engine's: backends/gce/pricing.py).
"""

from __future__ import annotations

from orchestrator.errors import RefusedError, UsageError
from orchestrator.text import format_duration

# GCE's own ceiling for max_run_duration is 120 days; bench never needs more than a day.
MAX_RUN_SECONDS_CEILING = 24 * 3600
LOCAL_DEFAULT_MAX_RUN_SECONDS = 2 * 3600
# The most one launch may be given: more than a day (the longest cap) of the dearest machine
# a launch can ask for (8 GPUs, on-demand, every GPU type of a sweep), and small enough that
# every figure derived from it stays an ordinary number (1e306 overflowed the time cap).
MAX_BUDGET_USD = 10_000.0


def check_fits_local_cap(estimated_seconds: int, cap_seconds: int) -> None:
    """A local run has no budget to raise: a plan longer than its cap is a usage error."""
    if estimated_seconds > cap_seconds:
        raise UsageError(
            f"the plan needs about {format_duration(estimated_seconds)}, more than the local "
            f"time cap of {format_duration(cap_seconds)}; choose a plan with fewer samples "
            "or configs"
        )


def check_monthly_cap(
    monthly_cap: float | None, spent_this_month: float, budget_usd: float
) -> None:
    """Refuse when this launch's worst case (its whole budget) would pass the monthly cap."""
    if monthly_cap is None or spent_this_month + budget_usd <= monthly_cap:
        return
    raise RefusedError(
        f"monthly cap ${monthly_cap:.2f}: ${spent_this_month:.2f} already committed this month, "
        f"and this launch may spend up to ${budget_usd:.2f}; lower --budget or raise monthly_cap"
    )
