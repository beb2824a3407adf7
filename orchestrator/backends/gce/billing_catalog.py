"""Compute Engine's list prices from the Cloud Billing Catalog API, mapped onto the items of
bench's price catalog (orchestrator/data/prices.toml) and cached, dated, in the state dir.

The API: `services.skus.list` (https://cloud.google.com/billing/docs/reference/rest/v1/
services.skus/list; how-to: https://cloud.google.com/billing/v1/how-tos/catalog-api) lists a
service's public SKUs, 5,000 a page, each with a `description`, a `category`
(resourceFamily, resourceGroup, usageType: "OnDemand", "Preemptible", "Commit1Yr", ...),
its `serviceRegions`, and `pricingInfo`, "a timeline of pricing info ... in chronological
order", whose `pricingExpression` names the `usageUnit` and `tieredRates[].unitPrice`, a
Money of `units` (an int64 as a decimal string) and `nanos` (10^-9 units).

Everything in the answer is untrusted input: a SKU whose price is not a finite,
non-negative, bounded USD amount in the unit expected is skipped, never fatal, and an item
the mapping cannot find keeps the bundled price (never a guess). The machine shapes and the
description patterns below are bench's: an item priced from them names its SKUs' sources.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.config import BenchConfig
from orchestrator.errors import CloudError, ConfigError, PermissionDeniedError, network_reason

COMPUTE_SERVICE = "services/6F81-5844-456A"  # Compute Engine's service id in the catalog
DEFAULT_BILLING_ENDPOINT = "https://cloudbilling.googleapis.com"
SOURCE = "Cloud Billing Catalog API"
CACHE_NAME = "billing_catalog.json"
CACHE_FORMAT = 1
# A read older than this is not used: spot prices "can change up to once every day"
# (https://cloud.google.com/spot-vms/pricing) and the cap holds back a rise (pricing.py).
MAX_CACHE_AGE = timedelta(days=7)
# Bounds on an answer: Compute Engine lists some tens of thousands of SKUs, 5,000 a page.
MAX_PAGES = 100
MAX_PAGE_BYTES = 64 << 20
PAGE_SKUS = 5_000
HTTP_TIMEOUT_SECONDS = 60
# No unit price bench reads (a vCPU-hour, a GiB-hour, a GPU-hour, a GiB-month, an
# address-hour) comes near this; a larger one is an odd answer, skipped.
MAX_UNIT_USD = 1_000.0
# Nor does a whole item's hourly price (8 H100s on demand are under $100/h).
MAX_ITEM_USD = 10_000.0


@dataclass(frozen=True)
class MachineShape:
    """A machine type's vCPUs and memory (GiB), and the SKU family that prices them."""

    vcpus: int
    memory_gib: float
    family: str  # the description's family: "G2 Instance" in "G2 Instance Core running in ..."


# The shapes of the machine types prices.toml prices: G2 and A2/A3 from
# https://cloud.google.com/compute/docs/accelerator-optimized-machines (g2-standard-4: 4
# vCPUs, 16 GB; a2-highgpu-1g: 12 vCPUs, 85 GB; a3-highgpu-1g: 26 vCPUs, 234 GB), N1 from
# https://cloud.google.com/compute/docs/general-purpose-machines#n1_machines (n1-standard-4:
# 4 vCPUs, 15 GB); the same shapes as the compute stand-in's catalog. Compute Engine's "GB"
# of memory is the GiB the RAM SKUs price ("GiBy.h").
MACHINE_SHAPES = {
    "g2-standard-4": MachineShape(4, 16, "G2 Instance"),
    "n1-standard-4": MachineShape(4, 15, "N1 Predefined Instance"),
    "a2-highgpu-1g": MachineShape(12, 85, "A2 Instance"),
    # Assumed from the G2/A2 pattern ("A3 Instance Core"): not confirmed in a document
    # this session could read. If Google names it otherwise, the item keeps its bundled price.
    "a3-highgpu-1g": MachineShape(26, 234, "A3 Instance"),
}
# Accelerator type -> the GPU's name in its SKU description ("Nvidia L4 GPU running in ...").
GPU_SKU_NAMES = {
    "nvidia-l4": "Nvidia L4",
    "nvidia-tesla-t4": "Nvidia Tesla T4",
    "nvidia-tesla-a100": "Nvidia Tesla A100",
    "nvidia-h100-80gb": "Nvidia H100 80GB",
}
KINDS = ("on_demand", "spot")
_USAGE_TYPE = {"on_demand": "OnDemand", "spot": "Preemptible"}
_REGION = re.compile(r"^[a-z]+(-[a-z0-9]+)+$")


# --- reading SKUs ------------------------------------------------------------------------


def read_skus(config: BenchConfig) -> Iterator[dict[str, Any]]:
    """Every SKU of Compute Engine, page by page, in USD (CloudError, ConfigError for no
    credentials, PermissionDeniedError for a 403)."""
    session = _session(config)
    endpoint = (config.billing_endpoint or DEFAULT_BILLING_ENDPOINT).rstrip("/")
    url = f"{endpoint}/v1/{COMPUTE_SERVICE}/skus"
    token = ""
    for _ in range(MAX_PAGES):
        params = {"currencyCode": "USD", "pageSize": str(PAGE_SKUS)}
        if token:
            params["pageToken"] = token
        page = _get_page(session, url, params)
        skus = page.get("skus", [])
        if not isinstance(skus, list):
            raise CloudError(f"{SOURCE}: an answer whose skus is not a list")
        yield from (sku for sku in skus if isinstance(sku, dict))
        token = page.get("nextPageToken") or ""
        if not isinstance(token, str):
            raise CloudError(f"{SOURCE}: an answer whose nextPageToken is not a string")
        if not token:
            return
    raise CloudError(f"{SOURCE}: more than {MAX_PAGES} pages of SKUs; not read")


def _session(config: BenchConfig):
    import requests

    if config.billing_endpoint:
        return requests.Session()  # a loopback stand-in: plain HTTP, no credentials
    from orchestrator.backends.gce.adaptor import auth, auth_exceptions, auth_requests

    try:
        credentials, _ = auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-billing.readonly"]
        )
    except auth_exceptions.DefaultCredentialsError as e:
        raise ConfigError(
            f"no Google credentials found ({e}); run `gcloud auth application-default login`"
        ) from None
    return auth_requests.AuthorizedSession(credentials)


def _get_page(session, url: str, params: dict[str, str]) -> dict[str, Any]:
    import requests

    from orchestrator.backends.gce.adaptor import auth_exceptions
    from orchestrator.boundary import LIMITS, parse_json
    from orchestrator.text import markup_safe

    try:
        with session.get(url, params=params, timeout=HTTP_TIMEOUT_SECONDS, stream=True) as answer:
            raw = answer.raw.read(MAX_PAGE_BYTES + 1, decode_content=True)
            status = answer.status_code
    except (requests.RequestException, OSError) as e:
        raise CloudError(f"cannot reach the {SOURCE} ({network_reason(e)}); try again") from None
    except auth_exceptions.GoogleAuthError as e:  # expired or revoked credentials
        raise PermissionDeniedError(
            f"the Google credentials could not be refreshed ({network_reason(e)}); run "
            "`gcloud auth application-default login` and try again"
        ) from None
    if status != 200:
        detail = markup_safe(_error_message(raw), 200)
        if status in (401, 403):
            raise PermissionDeniedError(
                f"the {SOURCE} refused the read (HTTP {status}: {detail}); enable "
                "cloudbilling.googleapis.com in the project or use `bench prices` without "
                "--refresh (the bundled catalog)"
            )
        raise CloudError(f"the {SOURCE} answered HTTP {status} ({detail}); try again")
    try:
        page = parse_json(raw, MAX_PAGE_BYTES, replace(LIMITS, json_items=2 * PAGE_SKUS))
    except ValueError as e:
        raise CloudError(f"the {SOURCE} sent an answer bench cannot read ({e})") from None
    if not isinstance(page, dict):
        raise CloudError(f"the {SOURCE} sent an answer that is not an object")
    return page


def _error_message(raw: bytes) -> str:
    """Google's error.message (https://cloud.google.com/apis/design/errors), else the start."""
    try:
        message = json.loads(raw[:65536])["error"]["message"]
        return message if isinstance(message, str) else ""
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace")


# --- SKUs to prices ----------------------------------------------------------------------


@dataclass(frozen=True)
class SkuRate:
    """One SKU's current price per usage unit, in the regions it serves."""

    sku_id: str
    description: str
    usage_type: str
    regions: tuple[str, ...]
    unit: str
    usd: float


def sku_rate(sku: Any) -> SkuRate | None:
    """The SKU's latest price (the last of `pricingInfo`, its dearest tier, so the cap holds
    whatever the usage), or None for anything odd."""
    try:
        category = sku["category"]
        info = sku["pricingInfo"][-1]["pricingExpression"]
        tiers = info["tieredRates"]
        usd = max(_money(tier["unitPrice"]) for tier in tiers)
        regions = tuple(r for r in sku.get("serviceRegions", []) if isinstance(r, str))
        rate = SkuRate(
            sku_id=str(sku.get("skuId", ""))[:40],
            description=sku["description"],
            usage_type=category["usageType"],
            regions=regions,
            unit=info["usageUnit"],
            usd=usd,
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    if not isinstance(rate.description, str) or not isinstance(rate.unit, str):
        return None
    return rate


def _money(money: Any) -> float:
    """A USD Money as a float; ValueError unless finite, non-negative and bounded."""
    if money.get("currencyCode", "USD") != "USD":
        raise ValueError("not USD")
    units, nanos = money.get("units", "0"), money.get("nanos", 0)
    if not isinstance(units, str) or not re.fullmatch(r"[0-9]{1,12}", units):
        raise ValueError("units")
    if isinstance(nanos, bool) or not isinstance(nanos, int) or not 0 <= nanos < 10**9:
        raise ValueError("nanos")
    usd = int(units) + nanos / 1e9
    if not 0 <= usd <= MAX_UNIT_USD:
        raise ValueError("out of bounds")
    return usd


# What each rate is: (description pattern, usageType, usageUnit). The descriptions are those
# of Compute Engine's SKUs ("G2 Instance Core running in Americas", "Spot Preemptible G2
# Instance Core running in Americas", "Nvidia L4 GPU attached to Spot Preemptible VMs
# running in Americas"); anchored, so "Custom", "Sole Tenancy" and commitment SKUs never match.
@cache
def _patterns() -> dict[tuple[str, ...], tuple[re.Pattern[str], str, str]]:
    where = r" running in [A-Za-z0-9 .()-]+"
    patterns: dict[tuple[str, ...], tuple[re.Pattern[str], str, str]] = {}
    families = {shape.family for shape in MACHINE_SHAPES.values()}
    for family in families:
        for part, unit in (("Core", "h"), ("Ram", "GiBy.h")):
            patterns[("vm", family, part, "on_demand")] = (
                re.compile(f"{re.escape(family)} {part}{where}"),
                "OnDemand",
                unit,
            )
            patterns[("vm", family, part, "spot")] = (
                re.compile(f"Spot Preemptible {re.escape(family)} {part}{where}"),
                "Preemptible",
                unit,
            )
    for name in GPU_SKU_NAMES.values():
        patterns[("gpu", name, "on_demand")] = (
            re.compile(f"{re.escape(name)} GPU{where}"),
            "OnDemand",
            "h",
        )
        patterns[("gpu", name, "spot")] = (
            re.compile(f"{re.escape(name)} GPU attached to Spot Preemptible VMs{where}"),
            "Preemptible",
            "h",
        )
    # pd-balanced capacity, per GiB-month (https://cloud.google.com/compute/disks-image-pricing);
    # "Regional Balanced PD Capacity" is a regional disk, not ours.
    patterns[("disk", "pd-balanced")] = (
        re.compile(r"Balanced PD Capacity( in [A-Za-z0-9 .()-]+)?"),
        "OnDemand",
        "GiBy.mo",
    )
    # The external IPv4 address in use on a standard or a Spot VM
    # (https://cloud.google.com/vpc/network-pricing#ipaddress).
    patterns[("ipv4", "on_demand")] = (
        re.compile(r"External IP Charge on a Standard VM( in [A-Za-z0-9 .()-]+)?"),
        "OnDemand",
        "h",
    )
    patterns[("ipv4", "spot")] = (
        re.compile(r"External IP Charge on a Spot Preemptible VM( in [A-Za-z0-9 .()-]+)?"),
        "OnDemand|Preemptible",
        "h",
    )
    return patterns


def classify(rate: SkuRate) -> tuple[str, ...] | None:
    """Which of bench's rates a SKU is, or None."""
    for key, (pattern, usage_type, unit) in _patterns().items():
        if (
            pattern.fullmatch(rate.description)
            and re.fullmatch(usage_type, rate.usage_type)
            and rate.unit == unit
        ):
            return key
    return None


def index_rates(skus: Iterable[Any]) -> dict[tuple[str, ...], dict[str, float]]:
    """Each of bench's rates, per region: the dearest SKU where two claim one (the cap's
    side of an ambiguity)."""
    index: dict[tuple[str, ...], dict[str, float]] = {}
    for sku in skus:
        rate = sku_rate(sku)
        key = classify(rate) if rate is not None else None
        if key is None:
            continue
        by_region = index.setdefault(key, {})
        for region in rate.regions:
            if _REGION.fullmatch(region) or region == "global":
                by_region[region] = max(by_region.get(region, 0.0), rate.usd)
    return index


def map_prices(skus: Iterable[Any], regions: Iterable[str]) -> dict[str, Any]:
    """The catalog's items the SKUs price, in prices.toml's shape (`regions.<r>.machines`,
    `.gpus`, `.disks`, and `external_ipv4`); an item missing a rate is left out."""
    index = index_rates(skus)
    mapped: dict[str, Any] = {"regions": {}}
    for region in regions:
        prices: dict[str, dict[str, Any]] = {"machines": {}, "gpus": {}, "disks": {}}
        for machine, shape in MACHINE_SHAPES.items():
            item = _item({kind: _machine_usd(index, shape, region, kind) for kind in KINDS})
            if item:
                prices["machines"][machine] = item
        for accelerator, name in GPU_SKU_NAMES.items():
            item = _item({kind: index.get(("gpu", name, kind), {}).get(region) for kind in KINDS})
            if item:
                prices["gpus"][accelerator] = item
        disk = index.get(("disk", "pd-balanced"), {}).get(region)
        if disk is not None:
            prices["disks"]["pd-balanced"] = {"gb_month": disk}
        mapped["regions"][region] = prices
    # One price everywhere in the bundled catalog: the dearest region's, or the global SKU's.
    address = _item(
        {kind: max(index.get(("ipv4", kind), {}).values(), default=None) for kind in KINDS}
    )
    if address:
        mapped["external_ipv4"] = address
    return mapped


def _machine_usd(index, shape: MachineShape, region: str, kind: str) -> float | None:
    core = index.get(("vm", shape.family, "Core", kind), {}).get(region)
    ram = index.get(("vm", shape.family, "Ram", kind), {}).get(region)
    if core is None or ram is None:
        return None
    return shape.vcpus * core + shape.memory_gib * ram


def _item(prices: dict[str, float | None]) -> dict[str, float] | None:
    """{"on_demand": x, "spot": y} when both are found and in bounds, else None."""
    if all(_bounded(price) for price in prices.values()):
        return prices
    return None


def _bounded(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_ITEM_USD
    )


# --- the cache -----------------------------------------------------------------------------


def cache_path(config: BenchConfig) -> Path:
    from orchestrator.paths import state_paths

    return state_paths(config).root / CACHE_NAME


def refresh(config: BenchConfig, regions: Iterable[str], now: datetime | None = None) -> dict:
    """Read the API, map it, write the cache; the cached document."""
    skus = list(read_skus(config))
    document = {
        "format": CACHE_FORMAT,
        "source": SOURCE,
        "read_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        "currency": "USD",
        "skus_read": len(skus),
        "prices": map_prices(skus, list(regions)),
    }
    _write_atomically(cache_path(config), json.dumps(document, indent=1, sort_keys=True))
    return document


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fresh_cache(config: BenchConfig, now: datetime | None = None) -> dict | None:
    """The cached read when it is younger than MAX_CACHE_AGE and well formed, else None:
    the file is checked as untrusted (hand-edited, truncated, another version's)."""
    from orchestrator.boundary import parse_json

    try:
        document = parse_json(cache_path(config).read_bytes(), 4 << 20)
        read_at = datetime.fromisoformat(document["read_at"])
        if document["format"] != CACHE_FORMAT or read_at.tzinfo is None:
            return None
        age = (now or datetime.now(UTC)) - read_at
        if not timedelta(minutes=-10) <= age < MAX_CACHE_AGE:  # a future date is not a read
            return None
        prices = checked_prices(document["prices"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {"read_date": read_at.date().isoformat(), "prices": prices}


def unused_cache_warning(config: BenchConfig, now: datetime | None = None) -> str:
    """Why a cached read exists but `fresh_cache` dropped it (over MAX_CACHE_AGE, or not
    readable), in a sentence for launch and prices to print; "" when there is no cache."""
    from orchestrator.boundary import parse_json

    path = cache_path(config)
    if not path.exists():
        return ""
    refresh = "run `bench prices --refresh` to read them again"
    try:
        read_at = datetime.fromisoformat(parse_json(path.read_bytes(), 4 << 20)["read_at"])
        read = f"the {SOURCE} read of {read_at.date().isoformat()}"
        if read_at.tzinfo is not None and (now or datetime.now(UTC)) - read_at >= MAX_CACHE_AGE:
            return (
                f"{read} is over {MAX_CACHE_AGE.days} days old and was not used: prices are "
                f"bench's bundled catalog's, which may be older; {refresh}"
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        read = f"the {SOURCE} read at {path}"
    return (
        f"{read} is malformed or another version's and was not used: prices are bench's "
        f"bundled catalog's; {refresh}"
    )


def checked_prices(prices: Any) -> dict[str, Any]:
    """Only the items of the expected names whose every figure is a bounded number."""
    checked: dict[str, Any] = {"regions": {}}
    for region, items in dict(prices.get("regions", {})).items():
        if not (isinstance(region, str) and _REGION.fullmatch(region)):
            continue
        kept: dict[str, dict[str, Any]] = {}
        for kind, names, fields in (
            ("machines", MACHINE_SHAPES, KINDS),
            ("gpus", GPU_SKU_NAMES, KINDS),
            ("disks", ("pd-balanced",), ("gb_month",)),
        ):
            kept[kind] = {
                name: {f: float(item[f]) for f in fields}
                for name, item in dict(items.get(kind, {})).items()
                if name in names
                and isinstance(item, dict)
                and all(_bounded(item.get(f)) for f in fields)
            }
        checked["regions"][region] = kept
    address = prices.get("external_ipv4")
    if isinstance(address, dict) and all(_bounded(address.get(k)) for k in KINDS):
        checked["external_ipv4"] = {k: float(address[k]) for k in KINDS}
    return checked


def with_api_prices(bundled: dict, cached: dict) -> dict:
    """The bundled catalog with every item the API priced replaced (or added, where the
    bundled catalog had none), each marked `from_api`; the rest as bundled."""
    import copy

    catalog = copy.deepcopy(bundled)
    source = f"{SOURCE}, read {cached['read_date']}"
    catalog["api_read_date"] = cached["read_date"]
    for region, found in cached["prices"]["regions"].items():
        prices = catalog["regions"].get(region)
        if prices is None:
            continue  # a region bench has no zones for: nothing launches there
        for kind, items in found.items():
            for name, figures in items.items():
                prices.setdefault(kind, {})[name] = {**figures, "source": source, "from_api": True}
    if "external_ipv4" in cached["prices"]:
        catalog["external_ipv4"] = {
            **cached["prices"]["external_ipv4"],
            "source": source,
            "from_api": True,
        }
    return catalog
