"""Error payloads shaped like the ones Compute Engine sends.

Two shapes exist in the real API:
- a synchronous HTTP error: `{"error": {"code", "message", "errors": [{"reason", ...}]}}`;
  google-api-core turns it into an exception whose `.errors` is that list of dicts;
- a failed operation: DONE with `error.errors[{code, message}]` plus
  `httpErrorStatusCode`/`httpErrorMessage`; only then does the client see a failure
  (google-cloud-compute's ExtendedOperation raises only then), and `.errors[0].code` holds
  e.g. ZONE_RESOURCE_POOL_EXHAUSTED.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HTTP_REASON_PHRASES = {
    400: "BAD REQUEST",
    403: "FORBIDDEN",
    404: "NOT FOUND",
    409: "CONFLICT",
    429: "TOO MANY REQUESTS",
    503: "SERVICE UNAVAILABLE",
}


@dataclass
class GceError(Exception):
    """One failure, renderable either as an HTTP error or as a failed operation."""

    status: int
    reason: str  # HTTP-error `reason`, e.g. notFound, quotaExceeded
    code: str  # operation error `code`, e.g. ZONE_RESOURCE_POOL_EXHAUSTED
    message: str
    domain: str = "global"
    details: list[dict[str, Any]] = field(default_factory=list)

    def http_payload(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": self.domain, "reason": self.reason}],
            }
        }

    def operation_fields(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            entry["errorDetails"] = self.details
        return {
            "error": {"errors": [entry]},
            "httpErrorStatusCode": self.status,
            "httpErrorMessage": HTTP_REASON_PHRASES.get(self.status, "ERROR"),
        }


def not_found(resource_path: str) -> GceError:
    return GceError(
        404, "notFound", "RESOURCE_NOT_FOUND", f"The resource '{resource_path}' was not found"
    )


def already_exists(resource_path: str) -> GceError:
    return GceError(
        409,
        "alreadyExists",
        "RESOURCE_ALREADY_EXISTS",
        f"The resource '{resource_path}' already exists",
    )


def invalid(message: str) -> GceError:
    return GceError(400, "invalid", "INVALID_FIELD_VALUE", message)


def stockout(project: str, zone: str, code: str, machine_type: str) -> GceError:
    # The _WITH_DETAILS variant carries a resource-type suffix and structured details.
    message = (
        f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
        "available to fulfill the request.  Try a different zone, or try again later."
    )
    details: list[dict[str, Any]] = []
    if code.endswith("_WITH_DETAILS"):
        message = (
            f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
            "available to fulfill the request.  '(resource type:compute)'."
        )
        unavailable = f"A {machine_type} VM instance is currently unavailable in the {zone} zone."
        details = [
            {
                "errorInfo": {
                    "domain": "compute.googleapis.com",
                    "reason": "resource_availability",
                    "metadatas": {"vmType": machine_type, "zone": zone},
                }
            },
            {
                "localizedMessage": {
                    "locale": "en-US",
                    "message": unavailable,
                }
            },
        ]
    return GceError(503, code, code, message, details=details)


def machine_type_missing(zone: str, machine_type: str) -> GceError:
    return invalid(
        f"Invalid value for field 'resource.machineType': "
        f"'zones/{zone}/machineTypes/{machine_type}'. "
        f"Machine type with name '{machine_type}' does not exist in zone '{zone}'."
    )


def quota_exceeded(quota: str, region: str | None, limit: float = 0.0) -> GceError:
    where = f"in region {region}" if region else "globally"
    return GceError(
        403,
        "quotaExceeded",
        "QUOTA_EXCEEDED",
        f"Quota '{quota}' exceeded.  Limit: {limit:.1f} {where}.",
        domain="usageLimits",
    )


def transient(status: int) -> GceError:
    if status == 429:
        return GceError(
            429,
            "rateLimitExceeded",
            "RATE_LIMIT_EXCEEDED",
            "Rate Limit Exceeded",
            domain="usageLimits",
        )
    return GceError(
        status,
        "backendError",
        "BACKEND_ERROR",
        "Internal error. Please try again or contact Google Support.",
    )
