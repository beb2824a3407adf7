"""The org policies doctor judges, read as Resource Manager's effective OrgPolicy
(orchestrator/backends/gce/org_policies.py): a list policy's allValues, deniedValues and
allowedValues, a boolean policy's enforced, and no policy at all (the default)."""

from __future__ import annotations

from orchestrator.backends.gce.org_policies import (
    EXTERNAL_IP,
    NO_ACCOUNT_CREATION,
    NO_DEFAULT_NETWORK,
    TRUSTED_IMAGES,
    judged,
    list_allows,
    org_policy_check,
)
from orchestrator.config import BenchConfig

IMAGES = "projects/deeplearning-platform-release"


def test_a_list_policy_allows_as_its_fields_say():
    assert list_allows({}, IMAGES)  # no policy: the constraint's default
    assert not list_allows({"listPolicy": {"allValues": "DENY"}}, IMAGES)
    assert list_allows({"listPolicy": {"allValues": "ALLOW", "deniedValues": [IMAGES]}}, IMAGES)
    assert not list_allows({"listPolicy": {"deniedValues": [IMAGES]}}, IMAGES)
    assert list_allows({"listPolicy": {"allowedValues": [IMAGES]}}, IMAGES)
    assert not list_allows({"listPolicy": {"allowedValues": ["projects/debian-cloud"]}}, IMAGES)


def test_what_stops_bench_and_what_is_only_said():
    config = BenchConfig()
    named_only = {"listPolicy": {"allowedValues": ["projects/p/zones/z/instances/a"]}}
    assert judged(EXTERNAL_IP, named_only, config)[0]  # bench's VM names are new each run
    assert not judged(EXTERNAL_IP, {"listPolicy": {"deniedValues": ["x"]}}, config)[0]
    assert not judged(EXTERNAL_IP, {}, config)[0]
    assert judged(TRUSTED_IMAGES, {"listPolicy": {"allValues": "DENY"}}, config)[0]
    on = {"booleanPolicy": {"enforced": True}}
    stops, said = judged(NO_DEFAULT_NETWORK, on, config)
    assert not stops and "gcloud compute networks create default" in said
    assert judged(NO_ACCOUNT_CREATION, on, config)[0]  # setup has not made the accounts
    assert not judged(
        NO_ACCOUNT_CREATION, on, BenchConfig(service_account="bench-vm@p-1.iam.gserviceaccount.com")
    )[0]


def test_a_check_with_nothing_readable_names_each_constraint_and_the_role():
    check = org_policy_check("p", {}, BenchConfig())
    assert check.ok and check.detail.startswith("could not read compute.vmExternalIpAccess, ")
    assert check.detail.endswith("roles/orgpolicy.policyViewer (orgpolicy.policy.get) on p")
