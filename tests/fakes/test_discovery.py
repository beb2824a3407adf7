"""The discovery-document validator the stand-ins use, on Google's compute v1 document."""

from __future__ import annotations

import pytest

from tests.fakes import discovery


def test_int64_travels_as_a_decimal_string():
    discovery.validate("compute", "v1", "Duration", {"seconds": "3600", "nanos": 0})
    with pytest.raises(discovery.DiscoveryError, match="expected a string"):
        discovery.validate("compute", "v1", "Duration", {"seconds": 3600})
    with pytest.raises(discovery.DiscoveryError, match="not an int64"):
        discovery.validate("compute", "v1", "Duration", {"seconds": "1h"})


def test_enums_nested_refs_and_unknown_fields():
    good = {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
    discovery.validate("compute", "v1", "Scheduling", good)
    with pytest.raises(discovery.DiscoveryError, match=r"\$.provisioningModel: 'CHEAP'"):
        discovery.validate("compute", "v1", "Scheduling", {"provisioningModel": "CHEAP"})
    with pytest.raises(discovery.DiscoveryError, match=r"\$.metadata.items\[0\]: unknown field"):
        discovery.validate(
            "compute", "v1", "Instance", {"metadata": {"items": [{"key": "a", "val": "b"}]}}
        )


def test_maps_use_additional_properties():
    discovery.validate("compute", "v1", "Instance", {"labels": {"bench-run": "x"}})
    with pytest.raises(discovery.DiscoveryError, match="expected a string"):
        discovery.validate("compute", "v1", "Instance", {"labels": {"bench-run": 1}})


def test_calls_check_their_query_parameters_and_body():
    discovery.validate_call(
        "compute", "v1", "instances.insert", {"requestId": "abc"}, {"name": "x"}
    )
    with pytest.raises(discovery.DiscoveryError, match="unknown query parameter 'bogus'"):
        discovery.validate_call("compute", "v1", "instances.insert", {"bogus": "1"}, {})
    with pytest.raises(discovery.DiscoveryError, match="takes no body"):
        discovery.validate_call("compute", "v1", "instances.get", {}, {"name": "x"})
    with pytest.raises(discovery.DiscoveryError, match="expected true or false"):
        discovery.validate_call(
            "compute", "v1", "instances.delete", {"noGracefulShutdown": "maybe"}, None
        )
