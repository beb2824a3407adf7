"""Loopback stand-in for the Cloud Billing Catalog API call `bench prices --refresh` makes.

  GET /v1/services/{service}/skus        cloudbilling services.skus.list

Rules, as documented (https://cloud.google.com/billing/v1/how-tos/catalog-api): results are
paged, 5,000 SKUs a page unless `pageSize` asks for fewer; an answer with more to come carries
a `nextPageToken`, set as `pageToken` to read the next page; the last page carries none.
`page_size` lowers the stand-in's own page size, so that a small SKU set still spans pages.
An unknown service answers 404, a token this stand-in did not issue 400. Every request and
answer is checked against the cloudbilling v1 discovery document.

`COMPUTE_SKUS` is a small realistic set: Compute Engine's SKU descriptions, categories and
units as the API lists them ("G2 Instance Core running in Americas", resourceGroup "CPU",
usageType "OnDemand", usageUnit "h"), with prices near the published ones.
"""

from __future__ import annotations

import re
from typing import Any

from . import discovery
from .http_base import JsonHandler, LoopbackStandIn

COMPUTE_SERVICE_ID = "6F81-5844-456A"
AMERICAS = ["us-central1", "us-east1", "us-east4"]
EUROPE = ["europe-west4"]
_DEFAULT_PAGE = 5000


def money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def sku(
    sku_id: str,
    description: str,
    usage_type: str,
    regions: list[str],
    unit: str,
    usd: float,
    *,
    family: str = "Compute",
    group: str = "CPU",
) -> dict[str, Any]:
    """One SKU in the API's shape (services.skus.list's Sku)."""
    unit_description = {"h": "hour", "GiBy.h": "gibibyte hour", "GiBy.mo": "gibibyte month"}
    return {
        "name": f"services/{COMPUTE_SERVICE_ID}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": family,
            "resourceGroup": group,
            "usageType": usage_type,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}],
                    "usageUnitDescription": unit_description.get(unit, unit),
                    "baseUnit": "s",
                    "baseUnitDescription": "second",
                    "baseUnitConversionFactor": 3600,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-11-27T09:00:00.000Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "MULTI_REGIONAL", "regions": regions},
    }


def _vm(prefix: str, family: str, region_name: str, regions: list[str], core: float, ram: float):
    """A machine family's core and RAM SKUs, on-demand and spot, in one pricing region."""
    out = []
    for spot, factor in ((False, 1.0), (True, 0.4)):
        usage, lead = ("Preemptible", "Spot Preemptible ") if spot else ("OnDemand", "")
        tag = "S" if spot else "O"
        out.append(
            sku(
                f"{prefix}C{tag}-{region_name[:4].upper()}",
                f"{lead}{family} Core running in {region_name}",
                usage,
                regions,
                "h",
                core * factor,
                group="CPU",
            )
        )
        out.append(
            sku(
                f"{prefix}R{tag}-{region_name[:4].upper()}",
                f"{lead}{family} Ram running in {region_name}",
                usage,
                regions,
                "GiBy.h",
                ram * factor,
                group="RAM",
            )
        )
    return out


def _gpu(prefix: str, name: str, region_name: str, regions: list[str], usd: float, spot: float):
    where = f"running in {region_name}"
    return [
        sku(
            f"{prefix}GO-{region_name[:4].upper()}",
            f"{name} GPU {where}",
            "OnDemand",
            regions,
            "h",
            usd,
            group="GPU",
        ),
        sku(
            f"{prefix}GS-{region_name[:4].upper()}",
            f"{name} GPU attached to Spot Preemptible VMs {where}",
            "Preemptible",
            regions,
            "h",
            spot,
            group="GPU",
        ),
    ]


def compute_skus() -> list[dict[str, Any]]:
    """The set: every rate bench maps, in both pricing regions, and SKUs it must not take."""
    skus: list[dict[str, Any]] = []
    for region_name, regions, uplift in (("Americas", AMERICAS, 1.0), ("EMEA", EUROPE, 1.1)):
        skus += _vm("G2", "G2 Instance", region_name, regions, 0.024988 * uplift, 0.002916 * uplift)
        skus += _vm(
            "N1",
            "N1 Predefined Instance",
            region_name,
            regions,
            0.031611 * uplift,
            0.004237 * uplift,
        )
        skus += _vm("A2", "A2 Instance", region_name, regions, 0.031611 * uplift, 0.004237 * uplift)
        skus += _vm("A3", "A3 Instance", region_name, regions, 0.029563 * uplift, 0.002964 * uplift)
        skus += _gpu("L4", "Nvidia L4", region_name, regions, 0.56004 * uplift, 0.2231 * uplift)
        skus += _gpu("T4", "Nvidia Tesla T4", region_name, regions, 0.35 * uplift, 0.175 * uplift)
        skus += _gpu(
            "A1", "Nvidia Tesla A100", region_name, regions, 2.933908 * uplift, 1.4341 * uplift
        )
        skus += _gpu(
            "H1", "Nvidia H100 80GB", region_name, regions, 9.79655 * uplift, 2.2356 * uplift
        )
    for region in AMERICAS + EUROPE:
        skus.append(
            sku(
                f"PDB-{region}",
                f"Balanced PD Capacity in {region}",
                "OnDemand",
                [region],
                "GiBy.mo",
                0.1 if region == "us-central1" else 0.11,
                family="Storage",
                group="SSD",
            )
        )
    skus.append(
        sku(
            "IP-STD",
            "External IP Charge on a Standard VM",
            "OnDemand",
            AMERICAS + EUROPE,
            "h",
            0.005,
            family="Network",
            group="IpAddress",
        )
    )
    skus.append(
        sku(
            "IP-SPOT",
            "External IP Charge on a Spot Preemptible VM",
            "OnDemand",
            AMERICAS + EUROPE,
            "h",
            0.0025,
            family="Network",
            group="IpAddress",
        )
    )
    # Neighbours bench must not take for its items: a custom shape, a commitment, a
    # regional disk, an A3 Mega GPU.
    skus.append(
        sku(
            "G2-CUSTOM",
            "G2 Custom Instance Core running in Americas",
            "OnDemand",
            AMERICAS,
            "h",
            5.0,
        )
    )
    skus.append(
        sku(
            "G2-CUD",
            "Commitment v1: G2 Cpu in Americas for 1 Year",
            "Commit1Yr",
            AMERICAS,
            "h",
            7.0,
        )
    )
    skus.append(
        sku(
            "RPD",
            "Regional Balanced PD Capacity in us-central1",
            "OnDemand",
            ["us-central1"],
            "GiBy.mo",
            9.0,
            family="Storage",
            group="SSD",
        )
    )
    skus.append(
        sku(
            "H1M",
            "Nvidia H100 80GB Mega GPU running in Americas",
            "OnDemand",
            AMERICAS,
            "h",
            99.0,
            group="GPU",
        )
    )
    return skus


class _Handler(JsonHandler):
    def handle_request(self) -> None:
        server: FakeBilling = self.server.owner  # type: ignore[attr-defined]
        match = re.fullmatch(r"/v1/services/([^/]+)/skus", self.url_path)
        if self.command != "GET" or match is None:
            self.reply_json(404, _error(404, "NOT_FOUND", f"no route {self.url_path}"))
            return
        status, payload = server.list_skus(match.group(1), self.query)
        self.reply_json(status, payload)


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


class FakeBilling(LoopbackStandIn):
    handler_class = _Handler

    def __init__(self, skus: list[dict[str, Any]] | None = None, page_size: int = 0) -> None:
        super().__init__()
        self.skus = compute_skus() if skus is None else skus
        self.page_size = page_size  # 0: the API's own (5,000, or the request's pageSize)
        self.requests: list[dict[str, str]] = []

    def list_skus(self, service: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.requests.append(dict(query))
        try:
            discovery.validate_call("cloudbilling", "v1", "services.skus.list", query, None)
        except discovery.DiscoveryError as e:
            self.schema_violations.append(str(e))
            return 400, _error(400, "INVALID_ARGUMENT", str(e))
        if service != COMPUTE_SERVICE_ID:
            return 404, _error(404, "NOT_FOUND", f"service {service} not found")
        token = query.get("pageToken", "")
        if token and not re.fullmatch(r"page-[0-9]+", token):
            return 400, _error(400, "INVALID_ARGUMENT", "Invalid page token.")
        start = int(token.removeprefix("page-")) if token else 0
        size = min(int(query.get("pageSize") or _DEFAULT_PAGE), _DEFAULT_PAGE)
        size = min(size, self.page_size) if self.page_size else size
        page: dict[str, Any] = {"skus": self.skus[start : start + size]}
        if start + size < len(self.skus):
            page["nextPageToken"] = f"page-{start + size}"
        try:
            discovery.validate_response("cloudbilling", "v1", "services.skus.list", page)
        except discovery.DiscoveryError as e:
            self.schema_violations.append(str(e))
        return 200, page
