"""What Compute Engine said, turned into bench errors at the API boundary.

The client raises `google.api_core.exceptions.*` both for a refused request and (through
our operation polling) for an operation that failed later, e.g. a spot stockout. Their
`errors` hold dicts (`reason`, `message`) for the former and proto `Errors` (`code`,
`message`) for the latter; `_codes_and_text` reads both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from orchestrator.config import region_of
from orchestrator.errors import (
    BenchError,
    CloudError,
    ConfigError,
    NoCapacityError,
    PermissionDeniedError,
    QuotaError,
    network_reason,
)

T = TypeVar("T")

# Codes that mean "this zone cannot give you the machine right now": try the next zone.
STOCKOUT_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "UNSUPPORTED_OPERATION",
        "RESOURCE_NOT_READY",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
GLOBAL_GPU_QUOTA = "GPUS_ALL_REGIONS"

_QUOTA_NAME = re.compile(r"Quota '([A-Za-z0-9_]+)' exceeded")
_QUOTA_REGION = re.compile(r"in region ([a-z]+-[a-z]+[0-9]+)")
_NOT_IN_ZONE = re.compile(
    r"(machine ?type|accelerator ?type|acceleratorType|machineType)[^.]*"
    r"(does not exist|not found|not available|is not supported|unavailable)",
    re.IGNORECASE,
)


class ZoneUnavailable(NoCapacityError):
    """Internal signal: this zone cannot host the machine (stockout, or type not offered)."""

    def __init__(self, zone: str, reason: str, detail: str = "") -> None:
        super().__init__(f"{zone}: {reason}" + (f" ({detail})" if detail else ""))
        self.zone, self.reason, self.detail = zone, reason, detail


class RegionalQuotaExceeded(QuotaError):
    """A quota of one region is used up; other regions may still work."""

    def __init__(self, quota: str, region: str, detail: str) -> None:
        super().__init__(f"quota {quota} exceeded in region {region}: {detail}")
        self.quota, self.region, self.detail = quota, region, detail


class ComputeUnreachable(CloudError):
    """No answer from the Compute API: network down, endpoint wrong, or retries ran out."""


class GlobalQuotaExceeded(QuotaError):
    """GPUS_ALL_REGIONS (or another project-wide quota): no zone anywhere will work."""

    def __init__(self, quota: str, detail: str) -> None:
        super().__init__(f"project-wide quota {quota} exceeded: {detail}")
        self.quota, self.detail = quota, detail


def _codes_and_text(exc: Exception) -> tuple[set[str], str]:
    codes: set[str] = set()
    texts = [str(getattr(exc, "message", "") or exc)]
    for err in getattr(exc, "errors", None) or []:
        if isinstance(err, dict):
            fields = [err.get("reason"), err.get("code")]
            message = err.get("message")
        else:
            fields = [getattr(err, "code", None), getattr(err, "reason", None)]
            message = getattr(err, "message", None)
        codes.update(str(f) for f in fields if f)
        # The top-level message usually repeats the first error's: say it once.
        if message and not any(str(message) in text for text in texts):
            texts.append(str(message))
    return codes, " | ".join(t for t in texts if t)


def _status(exc: Exception) -> int | None:
    code = getattr(exc, "code", None)
    return int(code) if isinstance(code, int) else None


# What a 403 from Compute Engine says the caller needs (Batch's translation replaces it).
LAUNCHER_ROLES = (
    "roles/compute.instanceAdmin.v1 and roles/iam.serviceAccountUser on the VM's service account"
)


def translate(exc: Exception, *, project: str, zone: str | None = None) -> BenchError:
    """One bench error for one google.api_core exception; `zone` is where it happened."""
    codes, text = _codes_and_text(exc)
    status = _status(exc)
    mentioned = {c for c in STOCKOUT_CODES if c in text}
    if zone and (codes & STOCKOUT_CODES or mentioned):
        return ZoneUnavailable(zone, "no capacity", min(codes & STOCKOUT_CODES or mentioned))
    if codes & QUOTA_CODES or _QUOTA_NAME.search(text):
        return _quota_error(text, zone)
    if zone and status == 400 and _NOT_IN_ZONE.search(text):
        return ZoneUnavailable(zone, "machine or GPU type not offered in this zone")
    if status == 401:
        return PermissionDeniedError(
            f"Compute Engine rejected the credentials ({text}); run "
            "`gcloud auth application-default login` and try again"
        )
    if status == 403:
        return PermissionDeniedError(
            f"Compute Engine denied the request in project {project} ({text}); you need "
            f"{LAUNCHER_ROLES}"
        )
    if status == 404:
        return ConfigError(
            f"Compute Engine could not find something the request names ({text}); check "
            "project, image_project/image_family and the default network"
        )
    if status == 400:
        return ConfigError(f"Compute Engine rejected the request: {text}")
    where = f" in {zone}" if zone else ""
    http = f" (HTTP {status})" if status else ""
    return CloudError(f"Compute Engine error{where}{http}: {text}")


def _quota_error(text: str, zone: str | None) -> QuotaError:
    match = _QUOTA_NAME.search(text)
    quota = match.group(1) if match else "unknown quota"
    if quota == GLOBAL_GPU_QUOTA or "globally" in text or GLOBAL_GPU_QUOTA in text:
        return GlobalQuotaExceeded(GLOBAL_GPU_QUOTA if GLOBAL_GPU_QUOTA in text else quota, text)
    region_match = _QUOTA_REGION.search(text)
    region = region_match.group(1) if region_match else (region_of(zone) if zone else "?")
    return RegionalQuotaExceeded(quota, region, text)


def unreachable(exc: BaseException, *, endpoint: str) -> ComputeUnreachable:
    """The Compute API could not be reached at all (no HTTP status to translate)."""
    return ComputeUnreachable(
        f"cannot reach Compute Engine at {endpoint} ({network_reason(exc)}); check the "
        "network connection (and `compute_endpoint`, if set) and try again"
    )


def credentials_failed(exc: BaseException) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"the Google credentials could not be refreshed ({network_reason(exc)}); run "
        "`gcloud auth application-default login` and try again"
    )


def transient_read_retry(timeout_seconds: float):
    """The retry of a read: transient answers (429, 500, 503, connection and the auth
    layer's transport errors), backing off 0.5 s to 8 s, for at most `timeout_seconds`."""
    from orchestrator.backends.gce.adaptor import api_retry

    return api_retry.Retry(
        predicate=api_retry.if_transient_error,
        initial=0.5,
        maximum=8.0,
        multiplier=2.0,
        timeout=timeout_seconds,
    )


def call_google(
    fn: Callable[[], T],
    api_error: Callable[[BaseException], BenchError],
    *,
    endpoint: str,
    retried_error: Callable[[BaseException], BenchError] | None = None,
) -> T:
    """One call of a google-cloud client; whatever goes wrong leaves as a bench error: the
    API's answer through `api_error` (a retried call's last answer through `retried_error`,
    default the same), credentials that cannot be refreshed, an endpoint not reached."""
    import requests

    from orchestrator.backends.gce.adaptor import api_exceptions, auth_exceptions

    try:
        return fn()
    except api_exceptions.GoogleAPICallError as e:
        raise api_error(e) from e
    except api_exceptions.RetryError as e:
        # A read gave up retrying: report what it met last.
        if isinstance(e.cause, api_exceptions.GoogleAPICallError):
            raise (retried_error or api_error)(e.cause) from e.cause
        raise unreachable(e.cause or e, endpoint=endpoint) from e
    except (auth_exceptions.RefreshError, auth_exceptions.InvalidOperation) as e:
        # A 401 makes the transport refresh the credentials; when that fails (or they
        # cannot be refreshed at all) the credentials are what is wrong.
        raise credentials_failed(e) from e
    except (requests.RequestException, auth_exceptions.TransportError) as e:
        raise unreachable(e, endpoint=endpoint) from e
