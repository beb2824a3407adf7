"""translate(): google.api_core exceptions -> bench errors, for both error shapes."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from orchestrator.backends.gce.errors import (
    GlobalQuotaExceeded,
    RegionalQuotaExceeded,
    ZoneUnavailable,
    translate,
)
from orchestrator.errors import CloudError, ConfigError, PermissionDeniedError


def http_error(status, message, reason):
    return exceptions.from_http_status(
        status, message, errors=[{"message": message, "domain": "global", "reason": reason}]
    )


def operation_error(status, code, message):
    from google.cloud import compute_v1

    return exceptions.from_http_status(
        status, "ERROR", errors=[compute_v1.Errors(code=code, message=message)]
    )


@pytest.mark.parametrize(
    "code",
    [
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "UNSUPPORTED_OPERATION",
        "RESOURCE_NOT_READY",
    ],
)
def test_stockout_codes_mean_try_another_zone(code):
    error = translate(operation_error(503, code, "no room"), project="p", zone="us-east1-b")
    assert isinstance(error, ZoneUnavailable) and error.detail == code
    error = translate(http_error(503, f"503 {code}", code), project="p", zone="us-east1-b")
    assert isinstance(error, ZoneUnavailable)


def test_a_503_without_a_zone_is_not_a_stockout():
    error = translate(http_error(503, "backend", "backendError"), project="p")
    assert type(error) is CloudError


def test_regional_and_global_quota():
    regional = translate(
        operation_error(
            403,
            "QUOTA_EXCEEDED",
            "Quota 'NVIDIA_L4_GPUS' exceeded.  Limit: 1.0 in region europe-west4.",
        ),
        project="p",
        zone="europe-west4-a",
    )
    assert isinstance(regional, RegionalQuotaExceeded)
    assert (regional.quota, regional.region) == ("NVIDIA_L4_GPUS", "europe-west4")
    glob = translate(
        http_error(
            403, "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.", "quotaExceeded"
        ),
        project="p",
        zone="us-central1-a",
    )
    assert isinstance(glob, GlobalQuotaExceeded) and glob.quota == "GPUS_ALL_REGIONS"
    # The HTTP message and its errors[] entry say the same thing: the user reads it once.
    assert str(glob).count("Limit: 0.0 globally") == 1


def test_machine_type_missing_in_zone():
    error = translate(
        http_error(
            400,
            "Invalid value for field 'resource.machineType': "
            "'zones/us-west1-c/machineTypes/g2-standard-4'. Machine type with name "
            "'g2-standard-4' does not exist in zone 'us-west1-c'.",
            "invalid",
        ),
        project="p",
        zone="us-west1-c",
    )
    assert isinstance(error, ZoneUnavailable) and "not offered" in error.reason


def test_permission_auth_not_found_and_bad_request():
    assert isinstance(
        translate(http_error(403, "Required 'compute.instances.create'", "forbidden"), project="p"),
        PermissionDeniedError,
    )
    assert "application-default login" in str(
        translate(http_error(401, "bad creds", "authError"), project="p")
    )
    not_found = translate(
        http_error(
            404, "The resource 'projects/x/global/images/family/y' was not found", "notFound"
        ),
        project="p",
        zone="z-a1-b",
    )
    assert isinstance(not_found, ConfigError) and "image_family" in str(not_found)
    bad = translate(
        http_error(400, "Invalid value for field 'resource.name'", "invalid"),
        project="p",
        zone="us-central1-a",
    )
    assert isinstance(bad, ConfigError)
