"""Zone failover: try the configured zones in order until one places the VM.

Spot L4s run out zone by zone, so a stockout (or a zone that does not offer the machine
type) moves on to the next zone; a regional quota skips the rest of that region; a
project-wide GPU quota stops at once, since no zone can help. Every attempt is recorded,
so the user sees where bench looked and why each zone said no.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.gce.errors import (
    GlobalQuotaExceeded,
    RegionalQuotaExceeded,
    ZoneUnavailable,
)
from orchestrator.config import region_of
from orchestrator.errors import NoCapacityError, QuotaError

# build(zone, spot) -> body;  insert(zone, body) -> None or a bench error.
Build = Callable[[str, bool], Any]
Insert = Callable[[str, Any], None]


@dataclass
class Landed:
    zone: str
    spot: bool
    attempts: list[str] = field(default_factory=list)


@dataclass
class _Round:
    attempts: list[str] = field(default_factory=list)
    quota_errors: list[RegionalQuotaExceeded] = field(default_factory=list)
    stockouts: int = 0


def _try_zones(
    zones: list[str], spot: bool, build: Build, insert: Insert, attempts: list[str]
) -> tuple[str | None, _Round]:
    tried = _Round(attempts=attempts)
    kind = "spot" if spot else "on-demand"
    blocked: dict[str, str] = {}  # region -> quota that blocks it
    for zone in zones:
        region = region_of(zone)
        if region in blocked:
            attempts.append(
                f"{zone} ({kind}): skipped, quota {blocked[region]} is used up in {region}"
            )
            continue
        try:
            insert(zone, build(zone, spot))
        except ZoneUnavailable as e:
            tried.stockouts += 1
            attempts.append(f"{zone} ({kind}): {e.reason}" + (f" [{e.detail}]" if e.detail else ""))
        except RegionalQuotaExceeded as e:
            blocked[e.region] = e.quota
            tried.quota_errors.append(e)
            attempts.append(f"{zone} ({kind}): quota {e.quota} exceeded in {e.region}")
        except GlobalQuotaExceeded as e:
            attempts.append(f"{zone} ({kind}): project-wide quota {e.quota} exceeded")
            raise QuotaError(
                f"quota {e.quota} is exceeded for the whole project, so no zone can take the "
                f"VM ({e.detail}). Request an increase of {e.quota} (new projects start at 0) "
                "in the Cloud Console under IAM & Admin > Quotas, or use --backend local. "
                f"Tried: {'; '.join(attempts)}"
            ) from e
        else:
            return zone, tried
    return None, tried


def place(
    zones: list[str],
    build: Build,
    insert: Insert,
    spot: bool = True,
    suggest_on_demand: bool = True,
) -> Landed:
    """Insert into the first zone that takes it; raise NoCapacityError or QuotaError.

    The error's advice mentions on_demand_fallback when `suggest_on_demand` (the launch
    service retries on-demand itself when that setting is on).
    """
    attempts: list[str] = []
    zone, tried = _try_zones(zones, spot, build, insert, attempts)
    if zone:
        return Landed(zone, spot, attempts)
    raise _no_placement(zones, attempts, [tried], suggest_on_demand=suggest_on_demand)


def _no_placement(
    zones: list[str], attempts: list[str], rounds: list[_Round], suggest_on_demand: bool
) -> Exception:
    tried = "; ".join(attempts)
    quotas = sorted({f"{q.quota} in {q.region}" for r in rounds for q in r.quota_errors})
    if not any(r.stockouts for r in rounds):
        # Quota blocked every zone: capacity was never the problem.
        return QuotaError(
            f"quota exhausted: {', '.join(quotas)}. Request an increase in the Cloud Console "
            "(IAM & Admin > Quotas; spot VMs may use a separate PREEMPTIBLE_ quota), or add "
            f"zones of another region to `zones`. Tried: {tried}"
        )
    advice = ["wait a few minutes and launch again", "add more zones to `zones` in bench.toml"]
    if suggest_on_demand:
        advice.append(
            "set on_demand_fallback = true to allow an on-demand VM (about 2.5x the price)"
        )
    if quotas:
        advice.append(f"raise the quota ({', '.join(quotas)})")
    return NoCapacityError(
        f"no zone could place the VM ({len(zones)} zone(s) tried): {tried}. To do: "
        + "; or ".join(advice)
    )
