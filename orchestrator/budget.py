"""Cost engine: hourly rates from the dated price catalog, plan runtime estimates, and the
budget → cloud-enforced time cap arithmetic (DESIGN.md, "Budget and time caps").
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from importlib import resources

from orchestrator.config import BenchConfig, region_of, regions_of
from orchestrator.errors import ConfigError, RefusedError, UsageError
from results_schema.record import billed_usd

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HOURS_PER_MONTH = 730.0
# Held back from the budget: GCE bills at least one minute, and the VM lives a little past
# max_run_duration while it is being deleted.
BILLING_MARGIN_SECONDS = 120
# GCE's own ceiling for max_run_duration is 120 days; bench never needs more than a day.
MAX_RUN_SECONDS_CEILING = 24 * 3600
LOCAL_DEFAULT_MAX_RUN_SECONDS = 2 * 3600
# The most one launch may be given: more than a day (the longest cap) of the dearest machine
# a launch can ask for (8 GPUs, on-demand, every GPU type of a sweep), and small enough that
# every figure derived from it stays an ordinary number (1e306 overflowed the time cap).
MAX_BUDGET_USD = 10_000.0


@dataclass(frozen=True)
class HourlyRate:
    total: float
    items: list[tuple[str, float]] = field(default_factory=list)
    region: str = ""
    spot: bool = True
    catalog_date: str = ""
    disk: float = 0.0  # the boot disk's share of total: all a powered-off VM still bills


def load_catalog() -> dict:
    text = resources.files("orchestrator.data").joinpath("prices.toml").read_text()
    return tomllib.loads(text)


def hourly_rate(config: BenchConfig, spot: bool, catalog: dict | None = None) -> HourlyRate:
    """Machine + GPUs + boot disk, per hour: the dearest of the regions bench may land in."""
    catalog = catalog or load_catalog()
    check_zones(config.zones, catalog)
    regions = regions_of(config.zones)
    return max(
        (_region_rate(config, region, spot, catalog) for region in regions), key=lambda r: r.total
    )


def check_zones(zones: list[str], catalog: dict) -> None:
    """Every zone must be one the catalog prices and knows to have L4s (exit 2 otherwise)."""
    where = f"the price catalog (dated {catalog['catalog_date']})"
    for zone in zones:
        region = region_of(zone)
        prices = catalog["regions"].get(region)
        if prices is None:
            known = ", ".join(catalog["regions"])
            raise ConfigError(f"no prices for region {region} in {where}; priced regions: {known}")
        if zone not in prices["zones"]:
            raise ConfigError(
                f"unknown zone {zone}: {where} lists {', '.join(prices['zones'])} for {region}"
            )


def priced_disk_gb(disk_gb: int | None, catalog: dict) -> int:
    """The boot disk size to price: the configured one, else the catalog's image size."""
    return disk_gb or int(catalog["image_disk_gb"])


def _region_rate(config: BenchConfig, region: str, spot: bool, catalog: dict) -> HourlyRate:
    return machine_rate(
        region,
        config.machine_type,
        config.accelerator_type,
        config.accelerator_count,
        priced_disk_gb(config.disk_gb, catalog),
        spot,
        catalog,
    )


def machine_rate(
    region: str,
    machine_type: str,
    accelerator_type: str,
    accelerator_count: int,
    disk_gb: int,
    spot: bool,
    catalog: dict | None = None,
) -> HourlyRate:
    """Machine + GPUs + pd-balanced boot disk in one region, per hour; ConfigError when the
    catalog has no price for one of them."""
    catalog = catalog or load_catalog()
    where = f"the price catalog (dated {catalog['catalog_date']})"
    prices = catalog["regions"].get(region)
    if prices is None:
        raise ConfigError(f"no prices for region {region} in {where}")
    kind = "spot" if spot else "on_demand"
    machine = prices["machines"].get(machine_type)
    gpu = prices["gpus"].get(accelerator_type)
    if machine is None or (gpu is None and accelerator_count):
        missing = machine_type if machine is None else accelerator_type
        raise ConfigError(f"no price for {missing} in {region} in {where}")
    disk_per_hour = disk_gb * prices["disks"]["pd-balanced"]["gb_month"] / HOURS_PER_MONTH
    items = [
        (machine_type, machine[kind]),
        (
            f"{accelerator_count} x {accelerator_type}",
            gpu[kind] * accelerator_count if accelerator_count else 0.0,
        ),
        (f"{disk_gb} GB pd-balanced", disk_per_hour),
    ]
    return HourlyRate(
        total=sum(price for _, price in items),
        items=items,
        region=region,
        spot=spot,
        catalog_date=catalog["catalog_date"],
        disk=disk_per_hour,
    )


def max_run_seconds_for(budget_usd: float, rate_usd_per_hour: float) -> int:
    """What the budget buys at this rate, less the billing margin; the cloud enforces it."""
    bought = math.floor(budget_usd / rate_usd_per_hour * 3600) - BILLING_MARGIN_SECONDS
    return min(max(bought, 0), MAX_RUN_SECONDS_CEILING)


def worst_case_cost_usd(rate_usd_per_hour: float, max_run_seconds: int) -> float:
    """The most a machine can bill: until the cloud deletes it at its time cap, plus the
    billing margin that deletion takes."""
    return billed_usd(rate_usd_per_hour, max_run_seconds + BILLING_MARGIN_SECONDS)


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def check_covers(
    budget_usd: float, rate: HourlyRate, estimated_seconds: int, cap_seconds: int
) -> None:
    """Refuse (exit 3) when the time the budget buys is shorter than the plan needs."""
    if cap_seconds >= estimated_seconds:
        return
    needed = billed_usd(rate.total, estimated_seconds + BILLING_MARGIN_SECONDS)
    raise RefusedError(
        f"budget ${budget_usd:.2f} buys {format_duration(cap_seconds)} at "
        f"${rate.total:.4f}/h, but the plan needs about {format_duration(estimated_seconds)} "
        f"(≈ ${needed:.2f}); raise --budget or choose a smaller plan"
    )


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
