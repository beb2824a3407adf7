"""Cost engine: hourly rates from the dated price catalog, plan runtime estimates, and the
budget → cloud-enforced time cap arithmetic (DESIGN.md, "Budget and time caps").
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from importlib import resources

from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError, RefusedError
from results_schema import Plan

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

# Fixed phase costs on a fresh VM (seconds): boot and image pull, a torch install into a
# venv, compiling the kernel units on 4 vCPUs, uploads.
GCE_FIXED_SECONDS = {"boot": 120, "environment": 420, "build": 120, "upload": 30}
LOCAL_FIXED_SECONDS = {"environment": 5, "build": 30, "upload": 2}
# What one timed sample costs beyond the kernel itself (warmup share, L2 flush, telemetry,
# host overhead), by device.
PER_SAMPLE_OVERHEAD_SECONDS = {"cuda": 0.004, "cpu": 0.002}
# Rough sustained rates used only to estimate the kernel time of a sample.
ESTIMATE_TFLOPS = {"cuda": 40.0, "cpu": 0.02}


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
    regions = dict.fromkeys(zone.rsplit("-", 1)[0] for zone in config.zones)
    return max(
        (_region_rate(config, region, spot, catalog) for region in regions), key=lambda r: r.total
    )


def check_zones(zones: list[str], catalog: dict) -> None:
    """Every zone must be one the catalog prices and knows to have L4s (exit 2 otherwise)."""
    where = f"the price catalog (dated {catalog['catalog_date']})"
    for zone in zones:
        region = zone.rsplit("-", 1)[0]
        prices = catalog["regions"].get(region)
        if prices is None:
            known = ", ".join(catalog["regions"])
            raise ConfigError(f"no prices for region {region} in {where}; priced regions: {known}")
        if zone not in prices["zones"]:
            raise ConfigError(
                f"unknown zone {zone}: {where} lists {', '.join(prices['zones'])} for {region}"
            )


def _region_rate(config: BenchConfig, region: str, spot: bool, catalog: dict) -> HourlyRate:
    return machine_rate(
        region,
        config.machine_type,
        config.accelerator_type,
        config.accelerator_count,
        config.disk_gb,
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


def estimate_runtime_seconds(plan: Plan, backend: str) -> int:
    """Boot + environment + build + correctness + samples, from fixed costs and FLOPs."""
    fixed = GCE_FIXED_SECONDS if backend == "gce" else LOCAL_FIXED_SECONDS
    implementations = len(plan.identities)
    kernel_seconds = sum(
        config.flops() / (ESTIMATE_TFLOPS[plan.device] * 1e12) for config in plan.configs
    )
    timed = plan.samples_per_config * implementations * kernel_seconds
    overhead = plan.samples_per_implementation() * implementations
    overhead *= PER_SAMPLE_OVERHEAD_SECONDS[plan.device]
    correctness = 2.0 * len(plan.configs)
    return math.ceil(sum(fixed.values()) + timed + overhead + correctness)


# Past runs predict better than the model, but vary (boot times, installs): keep headroom.
HISTORY_HEADROOM = 1.25


def refined_estimate(model_seconds: int, past_seconds: list[float]) -> tuple[int, str]:
    """The estimate from past complete runs of the same plan and backend when there are any
    (their median, with headroom), else the model's; and a note saying which."""
    if not past_seconds:
        return model_seconds, "model"
    ordered = sorted(past_seconds)
    median = ordered[len(ordered) // 2]
    return math.ceil(median * HISTORY_HEADROOM), f"{len(ordered)} past runs"


def max_run_seconds_for(budget_usd: float, rate_usd_per_hour: float) -> int:
    """What the budget buys at this rate, less the billing margin; the cloud enforces it."""
    bought = math.floor(budget_usd / rate_usd_per_hour * 3600) - BILLING_MARGIN_SECONDS
    return min(max(bought, 0), MAX_RUN_SECONDS_CEILING)


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
    needed = rate.total * (estimated_seconds + BILLING_MARGIN_SECONDS) / 3600
    raise RefusedError(
        f"budget ${budget_usd:.2f} buys {format_duration(cap_seconds)} at "
        f"${rate.total:.4f}/h, but the plan needs about {format_duration(estimated_seconds)} "
        f"(≈ ${needed:.2f}); raise --budget or choose a smaller plan"
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
