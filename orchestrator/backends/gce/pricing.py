"""Compute Engine's money: hourly rates from the dated price catalog (bundled, or a Cloud
Billing Catalog API read), the worst case a run capped at a time can bill, and the time cap
a budget buys (DESIGN.md, "Budget and time caps"). Cloud Batch runs the same VMs and prices
them here too (backends/batch/). The service reaches it through `PricesRuns`
(backends/base.py), which `ComputeEnginePricing` implements.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from importlib import resources

from orchestrator.backends.base import CatalogRead
from orchestrator.backends.gce.compute import OPERATION_TIMEOUT_SECONDS
from orchestrator.budget import MAX_RUN_SECONDS_CEILING
from orchestrator.config import BenchConfig, region_of, regions_of
from orchestrator.errors import ConfigError, RefusedError, UsageError
from orchestrator.text import format_duration

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HOURS_PER_MONTH = 730.0
# What a run can bill past its time cap, each figure from Google's documentation:
# - the automatic termination may start up to 30 s after the time limit
#   (https://cloud.google.com/compute/docs/instances/limit-vm-runtime, Restrictions);
LATE_TERMINATION_SECONDS = 30
# - a delete stops the VM first, and it bills until TERMINATED: a stop or delete gives the
#   guest 90 s (a preemption 30 s) (https://cloud.google.com/compute/docs/shutdownscript);
SHUTDOWN_SECONDS = 90
# - vCPUs, memory and GPUs are "charged a minimum of 1 minute", then "in 1 second
#   increments" (https://cloud.google.com/compute/vm-instance-pricing#billing_model): for any
#   t > 0, max(60, ceil(t)) < t + 60.
BILLING_MINIMUM_SECONDS = 60
RUN_OVERRUN_SECONDS = LATE_TERMINATION_SECONDS + SHUTDOWN_SECONDS + BILLING_MINIMUM_SECONDS
# The boot disk and the address exist while the insert brings the VM up and while its delete
# takes it down: bench waits at most this long for each operation (an allowance from bench's
# own deadlines; Google documents no bound).
ATTACHED_OUTSIDE_RUN_SECONDS = 2 * OPERATION_TIMEOUT_SECONDS
# Spot prices of machine types and GPUs "can change up to once every day", at an hour Google
# does not name, and the discount is "up to 91%" off the on-demand price, with no floor
# (https://cloud.google.com/spot-vms/pricing, read 2026-11;
# https://docs.cloud.google.com/compute/docs/instances/create-use-spot, read 2026-11-29). The
# first change may fall on any second of the cap, and the one bound Google gives is that a
# discount never makes spot dearer than on-demand: so the worst case prices a spot machine
# and its GPUs at the on-demand rate from the start (`HourlyRate.machine_ceiling`), and the
# estimate, the likely bill, at the spot rate.


@dataclass(frozen=True)
class HourlyRate:
    total: float
    items: list[tuple[str, float]] = field(default_factory=list)
    region: str = ""
    spot: bool = True
    catalog_date: str = ""
    disk: float = 0.0  # the boot disk's share of total: all a powered-off VM still bills
    address: float = 0.0  # the external IPv4 address's share of total
    disk_gb: int = 0  # the boot disk's size, as priced
    api_read_date: str = ""  # when the Cloud Billing Catalog API was read; "" for bundled
    bundled_items: tuple[str, ...] = ()  # with api_read_date: the items it did not price
    on_demand_machine: float = 0.0  # the machine and GPUs at on-demand prices; 0: `machine`
    price_warning: str = ""  # a Cloud Billing Catalog API read dropped, said at every use

    @property
    def machine(self) -> float:
        """The machine and its GPUs: what bills only while the VM runs."""
        return self.total - self.disk - self.address

    @property
    def machine_ceiling(self) -> float:
        """The most the machine and its GPUs can bill per hour: a spot price may change on
        any day with no floor on its discount, so at most the on-demand price."""
        return max(self.machine, self.on_demand_machine)

    @property
    def price_source(self) -> str:
        bundled = f"bench's bundled price catalog, dated {self.catalog_date}"
        if not self.api_read_date:
            return bundled
        api = f"Cloud Billing Catalog API, read {self.api_read_date}"
        if not self.bundled_items:
            return api
        return f"{api}; {', '.join(self.bundled_items)} from {bundled}"


def load_catalog() -> dict:
    """bench's bundled catalog (orchestrator/data/prices.toml)."""
    text = resources.files("orchestrator.data").joinpath("prices.toml").read_text()
    return tomllib.loads(text)


def price_catalog(config: BenchConfig) -> dict:
    """The catalog launch and prices use: the bundled one with the items a Cloud Billing
    Catalog API read priced (`bench prices --refresh`, younger than a week), else as bundled."""
    from orchestrator.backends.gce.billing_catalog import (
        fresh_cache,
        unused_cache_warning,
        with_api_prices,
    )

    bundled = load_catalog()
    cached = fresh_cache(config)
    if cached is not None:
        return with_api_prices(bundled, cached)
    warning = unused_cache_warning(config)
    return {**bundled, "price_warning": warning} if warning else bundled


def hourly_rate(
    config: BenchConfig, spot: bool, catalog: dict | None = None, disk_gb: int | None = None
) -> HourlyRate:
    """Machine + GPUs + boot disk + external address, per hour: the dearest of the regions
    bench may land in. `disk_gb`: the boot disk's size as the insert asks for it (the
    image's, read from Compute), else `priced_disk_gb`."""
    catalog = catalog or price_catalog(config)
    check_zones(config.zones, catalog)
    regions = regions_of(config.zones)
    disk_gb = disk_gb or priced_disk_gb(config.disk_gb, catalog)
    return max(
        (_region_rate(config, region, spot, disk_gb, catalog) for region in regions),
        key=lambda r: r.total,
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
    """The boot disk size to price before the image is read: the configured one, else the
    catalog's assumed image size."""
    return disk_gb or int(catalog["image_disk_gb"])


def _region_rate(
    config: BenchConfig, region: str, spot: bool, disk_gb: int, catalog: dict
) -> HourlyRate:
    return machine_rate(
        region,
        config.machine_type,
        config.accelerator_type,
        config.accelerator_count,
        disk_gb,
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
    """Machine + GPUs + pd-balanced boot disk + one external IPv4 address in one region, per
    hour; ConfigError when the catalog has no price for one of them."""
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
    address = catalog["external_ipv4"][kind]
    bundled_items = [
        name
        for name, item in (
            (machine_type, machine),
            (accelerator_type, gpu if accelerator_count else None),
            ("pd-balanced", prices["disks"]["pd-balanced"]),
            ("external IPv4 address", catalog["external_ipv4"]),
        )
        if item is not None and not item.get("from_api")
    ]
    on_demand_machine = machine["on_demand"] + (
        gpu["on_demand"] * accelerator_count if accelerator_count else 0.0
    )
    items = [
        (machine_type, machine[kind]),
        (
            f"{accelerator_count} x {accelerator_type}",
            gpu[kind] * accelerator_count if accelerator_count else 0.0,
        ),
        (f"{disk_gb} GB pd-balanced", disk_per_hour),
        ("external IPv4 address", address),
    ]
    return HourlyRate(
        total=sum(price for _, price in items),
        items=items,
        region=region,
        spot=spot,
        catalog_date=catalog["catalog_date"],
        disk=disk_per_hour,
        address=address,
        disk_gb=disk_gb,
        api_read_date=catalog.get("api_read_date", ""),
        bundled_items=tuple(bundled_items),
        on_demand_machine=on_demand_machine,
        price_warning=catalog.get("price_warning", ""),
    )


def worst_case_items(rate: HourlyRate, cap_seconds: int) -> list[tuple[str, float]]:
    """What a run capped at `cap_seconds` can bill at most, item by item (USD): the machine
    and GPUs until the late termination, the shutdown and the billing minimum are over (at
    the on-demand price, the most a spot price can become); the disk and the address that
    long and for the insert and the delete besides."""
    running = cap_seconds + RUN_OVERRUN_SECONDS
    attached = running + ATTACHED_OUTSIDE_RUN_SECONDS
    return [
        ("machine and GPUs", rate.machine_ceiling * running / 3600),
        ("boot disk", rate.disk * attached / 3600),
        ("external address", rate.address * attached / 3600),
    ]


def rate_text(rate: HourlyRate) -> str:
    """The rate as a refusal names it: on spot, also the most it can become."""
    if rate.machine_ceiling <= rate.machine:
        return f"${rate.total:.4f}/h"
    most = rate.total - rate.machine + rate.machine_ceiling
    return f"${rate.total:.4f}/h (spot; up to ${most:.4f}/h should spot prices rise to on-demand)"


def worst_case_usd(rate: HourlyRate, cap_seconds: int) -> float:
    return sum(usd for _, usd in worst_case_items(rate, cap_seconds))


def max_run_seconds_for(budget_usd: float, rate: HourlyRate) -> int:
    """The longest time cap whose worst case (`worst_case_usd`) stays within the budget, at
    most a day; the cloud enforces it."""
    fixed = worst_case_usd(rate, 0)
    per_hour_of_cap = worst_case_usd(rate, 3600) - fixed
    bought = math.floor((budget_usd - fixed) / per_hour_of_cap * 3600)
    cap = min(max(bought, 0), MAX_RUN_SECONDS_CEILING)
    while cap > 0 and worst_case_usd(rate, cap) > budget_usd:  # float rounding, a step or two
        cap -= 1
    return cap


def check_buys_a_start(budget_usd: float, rate: HourlyRate, boot_seconds: float) -> None:
    """Refuse (exit 2) a budget whose time cap ends before the VM has booted and worked
    through GCE's one billed minute: whatever the plan, such a launch buys nothing."""
    needed = math.ceil(boot_seconds) + BILLING_MINIMUM_SECONDS
    if max_run_seconds_for(budget_usd, rate) >= needed:
        return
    raise UsageError(
        f"budget ${budget_usd:.2f} is too small for a gce run: booting the VM (about "
        f"{format_duration(needed - BILLING_MINIMUM_SECONDS)}) and its first billed minute "
        f"can cost ${worst_case_usd(rate, needed):.3f} at {rate_text(rate)}; raise --budget. "
        "Nothing was created"
    )


def check_covers(
    budget_usd: float, rate: HourlyRate, estimated_seconds: int, cap_seconds: int
) -> None:
    """Refuse (exit 3) when the time the budget buys is shorter than the plan needs."""
    if cap_seconds >= estimated_seconds:
        return
    needed = worst_case_usd(rate, estimated_seconds)
    raise RefusedError(
        f"budget ${budget_usd:.2f} buys {format_duration(cap_seconds)} at "
        f"{rate_text(rate)}, but the plan needs about {format_duration(estimated_seconds)} "
        f"(≈ ${needed:.2f} at worst); raise --budget or choose a smaller plan"
    )


class ComputeEnginePricing:
    """`PricesRuns` and `ShowsPriceCatalog` for a backend whose runs are Compute Engine VMs
    (gce, and Cloud Batch's VMs): the rules above, asked for through the backend class."""

    @classmethod
    def run_rate(cls, config: BenchConfig, spot: bool, disk_gb: int | None = None) -> HourlyRate:
        return hourly_rate(config, spot=spot, disk_gb=disk_gb)

    @classmethod
    def max_run_seconds_for(cls, budget_usd: float, rate: HourlyRate) -> int:
        return max_run_seconds_for(budget_usd, rate)

    @classmethod
    def worst_case_usd(cls, rate: HourlyRate, cap_seconds: int) -> float:
        return worst_case_usd(rate, cap_seconds)

    @classmethod
    def check_buys_a_start(cls, budget_usd: float, rate: HourlyRate, boot_seconds: float) -> None:
        check_buys_a_start(budget_usd, rate, boot_seconds)

    @classmethod
    def check_covers(
        cls, budget_usd: float, rate: HourlyRate, estimated_seconds: int, cap_seconds: int
    ) -> None:
        check_covers(budget_usd, rate, estimated_seconds, cap_seconds)

    # `ShowsPriceCatalog`: what `bench prices` shows.

    @classmethod
    def price_catalog(cls, config: BenchConfig) -> dict:
        return price_catalog(config)

    @classmethod
    def refresh_price_catalog(cls, config: BenchConfig) -> CatalogRead:
        return refresh_catalog(config)

    @classmethod
    def rate_text(cls, rate: HourlyRate) -> str:
        return rate_text(rate)


def refresh_catalog(config: BenchConfig) -> CatalogRead:
    """Read the Cloud Billing Catalog API into the cache (`price_catalog` uses it for a
    week): what it read and priced."""
    from orchestrator.backends.gce import billing_catalog

    document = billing_catalog.refresh(config, load_catalog()["regions"])
    found = document["prices"]
    count = sum(len(items) for r in found["regions"].values() for items in r.values())
    count += "external_ipv4" in found
    return CatalogRead(
        source=billing_catalog.SOURCE,
        entries_read=document["skus_read"],
        items_priced=count,
        saved_to=billing_catalog.cache_path(config),
    )
