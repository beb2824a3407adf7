"""The organization policies that can stop a bench run, judged from the project's effective
policy for each (pure; `bench doctor` reads them: doctor.py, iam_api.py).

An effective policy is what Resource Manager v1 `projects.getEffectiveOrgPolicy` answers, "the
result of merging Policies in the resource hierarchy": an OrgPolicy with a `booleanPolicy`
(`enforced`) or a `listPolicy` (`allValues` ALLOW or DENY, or `allowedValues` /
`deniedValues`); neither set means the constraint's default, which for every constraint
here allows what bench does
(https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy,
the constraints: https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints).
Reading one needs orgpolicy.policy.get on the project (roles/orgpolicy.policyViewer); a
policy that cannot be read is named, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import Check

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

# A list constraint on the instances that may have an external IP, by full name
# (projects/P/zones/Z/instances/NAME): bench's VMs get one each (builder.py: PyPI), under a
# name new to each run, so any list of allowed instances leaves them out.
EXTERNAL_IP = "constraints/compute.vmExternalIpAccess"
# Boolean: a project created while it is enforced gets no `default` network, which bench's
# VMs are on (builder.py). It does not remove a network that exists.
NO_DEFAULT_NETWORK = "constraints/compute.skipDefaultNetworkCreation"
# A list constraint on the projects whose images VMs may boot (projects/PROJECT).
TRUSTED_IMAGES = "constraints/compute.trustedImageProjects"
# Boolean: `bench setup` creates two service accounts.
NO_ACCOUNT_CREATION = "constraints/iam.disableServiceAccountCreation"
CONSTRAINTS = (EXTERNAL_IP, NO_DEFAULT_NETWORK, TRUSTED_IMAGES, NO_ACCOUNT_CREATION)
POLICY_VIEWER = "roles/orgpolicy.policyViewer"


def enforced(policy: Mapping[str, Any]) -> bool:
    return bool((policy.get("booleanPolicy") or {}).get("enforced"))


def list_allows(policy: Mapping[str, Any], value: str) -> bool:
    """Whether a list policy allows `value` (no list policy: the default, allowed)."""
    listed = policy.get("listPolicy") or {}
    if listed.get("allValues") in ("ALLOW", "DENY"):
        return listed["allValues"] == "ALLOW"
    if value in (listed.get("deniedValues") or []):
        return False
    allowed = listed.get("allowedValues") or []
    return not allowed or value in allowed


def judged(constraint: str, policy: Mapping[str, Any], config: BenchConfig) -> tuple[bool, str]:
    """(whether it stops bench, what it means for bench) for one effective policy."""
    short = constraint.removeprefix("constraints/")
    if constraint == EXTERNAL_IP:
        listed = policy.get("listPolicy") or {}
        if listed.get("allValues") == "DENY" or (
            listed.get("allValues") != "ALLOW" and listed.get("allowedValues")
        ):
            return True, (
                f"{short} lets no new VM have an external IP: bench's VMs need one (their "
                "startup script installs from PyPI)"
            )
        return False, f"{short} allows external IPs"
    if constraint == TRUSTED_IMAGES:
        image = f"projects/{config.image_project}"
        if not list_allows(policy, image):
            return True, f"{short} does not trust {image}, where the boot image comes from"
        return False, f"{short} trusts {image}"
    if constraint == NO_DEFAULT_NETWORK:
        if enforced(policy):
            return False, (
                f"{short} is enforced: if the project has no `default` network, which bench's "
                "VMs use, create it (gcloud compute networks create default --subnet-mode=auto)"
            )
        return False, f"{short} is not enforced"
    if constraint == NO_ACCOUNT_CREATION:
        if enforced(policy):
            stops = config.service_account == "default"  # bench setup has not made them
            return stops, (
                f"{short} is enforced: `bench setup` cannot create bench-vm and bench-signer"
                + ("" if stops else " (service_account is set: they were made already)")
            )
        return False, f"{short} is not enforced"
    return False, f"{short}: not judged"


def org_policy_check(
    project: str, read: Mapping[str, Mapping[str, Any] | str], config: BenchConfig
) -> Check:
    """One doctor line from each constraint's effective policy, or the text of why it could
    not be read: ✗ when any stops bench; the ones not read are named either way."""
    stops, notes = [], []
    unread: dict[str, list[str]] = {}  # why -> the constraints it kept unread
    for constraint in CONSTRAINTS:
        policy = read.get(constraint, "not asked")
        if isinstance(policy, str):
            unread.setdefault(policy, []).append(constraint.removeprefix("constraints/"))
            continue
        blocks, what = judged(constraint, policy, config)
        (stops if blocks else notes).append(what)
    parts = stops or notes
    for why, names in unread.items():
        parts.append(f"could not read {', '.join(names)} ({why})")
    if unread:
        parts.append(f"reading them needs {POLICY_VIEWER} (orgpolicy.policy.get) on {project}")
    fix = ""
    if stops:
        fix = (
            f"ask an organization policy administrator to change the policy for {project} "
            "(https://cloud.google.com/resource-manager/docs/organization-policy/creating-managing-policies)"
        )
    return Check("org policies", not stops, "; ".join(parts), fix)
