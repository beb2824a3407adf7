"""Zone failover with a scripted insert: which zones are tried, in what order, and why."""

from __future__ import annotations

import pytest

from orchestrator.backends.gce.errors import (
    GlobalQuotaExceeded,
    RegionalQuotaExceeded,
    ZoneUnavailable,
)
from orchestrator.backends.gce.failover import place
from orchestrator.errors import NoCapacityError, QuotaError


class ScriptedInsert:
    """insert(zone, body): raises what the script says for that zone (and spot-ness)."""

    def __init__(self, outcomes: dict):
        self.outcomes = outcomes
        self.calls: list[tuple[str, bool]] = []

    def __call__(self, zone: str, body: dict) -> None:
        self.calls.append((zone, body["spot"]))
        outcome = self.outcomes.get((zone, body["spot"]), self.outcomes.get(zone))
        if outcome is not None:
            raise outcome(zone) if callable(outcome) else outcome


def build(zone: str, spot: bool) -> dict:
    return {"zone": zone, "spot": spot}


def stockout(zone):
    return ZoneUnavailable(zone, "no capacity", "ZONE_RESOURCE_POOL_EXHAUSTED")


def no_type(zone):
    return ZoneUnavailable(zone, "machine or GPU type not offered in this zone")


def regional_quota(zone):
    return RegionalQuotaExceeded("NVIDIA_L4_GPUS", zone.rsplit("-", 1)[0], "Limit: 0.0")


ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


def test_two_stockouts_land_in_the_third_zone_with_attempts_listed():
    insert = ScriptedInsert({"us-central1-a": stockout, "us-central1-b": no_type})
    landed = place(ZONES, build, insert)
    assert (landed.zone, landed.spot) == ("us-central1-c", True)
    assert [zone for zone, _ in insert.calls] == ZONES
    assert landed.attempts == [
        "us-central1-a (spot): no capacity [ZONE_RESOURCE_POOL_EXHAUSTED]",
        "us-central1-b (spot): machine or GPU type not offered in this zone",
    ]


def test_first_zone_that_works_wins_and_no_more_are_tried():
    insert = ScriptedInsert({})
    landed = place(ZONES, build, insert)
    assert landed.zone == "us-central1-a" and landed.attempts == []
    assert len(insert.calls) == 1


def test_quota_everywhere_raises_quota_error_naming_the_quota():
    zones = ["us-central1-a", "us-central1-b", "us-east4-a", "us-east4-c"]
    insert = ScriptedInsert({z: regional_quota for z in zones})
    with pytest.raises(QuotaError) as caught:
        place(zones, build, insert)
    assert not isinstance(caught.value, NoCapacityError)
    message = str(caught.value)
    assert "NVIDIA_L4_GPUS in us-central1" in message and "NVIDIA_L4_GPUS in us-east4" in message
    # A regional quota skips the rest of its region: one insert per region.
    assert [zone for zone, _ in insert.calls] == ["us-central1-a", "us-east4-a"]
    assert "us-central1-b (spot): skipped" in message


def test_gpus_all_regions_stops_at_once():
    global_quota = GlobalQuotaExceeded("GPUS_ALL_REGIONS", "Limit: 0.0 globally")
    insert = ScriptedInsert({"us-central1-a": global_quota})
    with pytest.raises(QuotaError, match="GPUS_ALL_REGIONS") as caught:
        place(ZONES, build, insert)
    assert len(insert.calls) == 1
    assert "IAM & Admin > Quotas" in str(caught.value)


def test_no_capacity_anywhere_lists_every_zone_and_what_to_do():
    insert = ScriptedInsert(
        {"us-central1-a": stockout, "us-central1-b": stockout, "us-central1-c": regional_quota}
    )
    with pytest.raises(NoCapacityError) as caught:
        place(ZONES, build, insert)
    message = str(caught.value)
    for zone in ZONES:
        assert zone in message
    assert "on_demand_fallback" in message and "add more zones" in message


def test_other_errors_are_not_swallowed():
    from orchestrator.errors import PermissionDeniedError

    insert = ScriptedInsert({"us-central1-a": PermissionDeniedError("nope")})
    with pytest.raises(PermissionDeniedError):
        place(ZONES, build, insert)
    assert len(insert.calls) == 1


def test_no_on_demand_advice_when_the_caller_retries_on_demand_itself():
    insert = ScriptedInsert({z: stockout for z in ZONES})
    with pytest.raises(NoCapacityError) as caught:
        place(ZONES, build, insert, suggest_on_demand=False)
    assert "on_demand_fallback" not in str(caught.value)
