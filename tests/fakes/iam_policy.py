"""IAM allow policies evaluated as Google documents them, for the stand-ins.

A principal holds a permission on a resource when a binding of the policy names it, the
binding's role includes the permission, and the binding's condition, if any, evaluates to
true for that resource (https://cloud.google.com/iam/docs/policies#structure,
https://cloud.google.com/iam/docs/conditions-overview). Conditions are CEL, evaluated here by
a real CEL implementation (cel-python); a condition that fails to evaluate grants nothing
(https://cloud.google.com/iam/docs/conditions-overview#evaluation). The resource attributes
are `resource.type`, `resource.service` and `resource.name`, the full resource name
(https://cloud.google.com/iam/docs/conditions-resource-attributes); `extract()` follows
https://cloud.google.com/iam/docs/conditions-attribute-reference#extract: the text after the
first occurrence of the template's prefix, up to its suffix, "" when either is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# Who calls a stand-in without a token: the developer running bench (the CLI, a test). The
# account that creates a project holds roles/owner on it
# (https://cloud.google.com/resource-manager/docs/creating-managing-projects);
# a test that takes roles away edits the project's policy.
CONTROLLER_MEMBER = "user:bench-user@example.com"


class _Everything(frozenset):
    """roles/owner: every permission (https://cloud.google.com/iam/docs/roles-overview#basic)."""

    def __contains__(self, permission: object) -> bool:
        return True


# The Compute Engine permissions the stand-ins model, as compute.instanceAdmin.v1 grants them
# (https://cloud.google.com/iam/docs/roles-permissions/compute#compute.instanceAdmin.v1).
_INSTANCE_ADMIN = {
    *(f"compute.instances.{verb}" for verb in ("create", "delete", "get", "list", "start")),
    *("compute.instances.stop", "compute.instances.getSerialPortOutput"),
    *("compute.disks.create", "compute.disks.delete", "compute.zoneOperations.get"),
    *(f"compute.{kind}.get" for kind in ("projects", "regions", "zones", "machineTypes")),
    *("compute.acceleratorTypes.get", "compute.images.get", "compute.images.getFromFamily"),
    *("compute.images.list", "compute.images.useReadOnly"),
}
# Predefined roles, as far as the stand-ins need them
# (https://cloud.google.com/storage/docs/access-control/iam-roles,
# https://cloud.google.com/iam/docs/service-account-permissions#user-role).
_OBJECT_USER = {
    "storage.objects.create",
    "storage.objects.delete",
    "storage.objects.get",
    "storage.objects.list",
    "storage.objects.update",
}
PREDEFINED_ROLES: dict[str, Collection[str]] = {
    "roles/storage.objectUser": _OBJECT_USER,
    "roles/storage.objectAdmin": _OBJECT_USER | {"storage.objects.setIamPolicy"},
    "roles/storage.admin": _OBJECT_USER | {"storage.buckets.get", "storage.buckets.getIamPolicy"},
    "roles/storage.objectViewer": {"storage.objects.get", "storage.objects.list"},
    "roles/storage.objectCreator": {"storage.objects.create"},
    "roles/storage.legacyObjectReader": {"storage.objects.get"},
    "roles/owner": _Everything(),
    "roles/compute.instanceAdmin.v1": _INSTANCE_ADMIN,
    # Batch's roles, as far as bench uses them
    # (https://cloud.google.com/iam/docs/roles-permissions/batch).
    "roles/batch.jobsEditor": {
        *(f"batch.jobs.{verb}" for verb in ("create", "delete", "get", "list", "update")),
        *("batch.tasks.get", "batch.tasks.list", "batch.locations.get", "batch.locations.list"),
        *("batch.operations.get", "batch.operations.list"),
    },
    "roles/batch.agentReporter": {"batch.states.report"},
    "roles/logging.logWriter": {"logging.logEntries.create"},
    # https://cloud.google.com/iam/docs/service-account-permissions#token-creator-role
    "roles/iam.serviceAccountTokenCreator": {
        "iam.serviceAccounts.getAccessToken",
        "iam.serviceAccounts.getOpenIdToken",
        "iam.serviceAccounts.implicitDelegation",
        "iam.serviceAccounts.signBlob",
        "iam.serviceAccounts.signJwt",
    },
    "roles/iam.serviceAccountUser": {
        "iam.serviceAccounts.actAs",
        "iam.serviceAccounts.get",
        "iam.serviceAccounts.list",
    },
}


def new_project_policy() -> dict[str, Any]:
    """A new project's allow policy: its creator is its owner."""
    return {"version": 1, "bindings": [{"role": "roles/owner", "members": [CONTROLLER_MEMBER]}]}


@dataclass(frozen=True)
class Resource:
    type: str  # e.g. "storage.googleapis.com/Object", "compute.googleapis.com/Instance"
    name: str  # the full resource name, e.g. "projects/_/buckets/b/objects/runs/x"

    @property
    def service(self) -> str:
        return self.type.split("/")[0]


def extract(text: Any, template: Any):
    from celpy import celtypes

    prefix, _, rest = str(template).partition("{")
    _, _, suffix = rest.partition("}")
    text = str(text)
    start = text.find(prefix)
    if start < 0:
        return celtypes.StringType("")
    tail = text[start + len(prefix) :]
    if suffix:
        end = tail.find(suffix)
        if end < 0:
            return celtypes.StringType("")
        tail = tail[:end]
    return celtypes.StringType(tail)


@lru_cache(maxsize=256)
def _program(expression: str):
    import celpy

    environment = celpy.Environment()
    return environment.program(environment.compile(expression), functions={"extract": extract})


def condition_holds(expression: str, resource: Resource) -> bool:
    import celpy

    activation = {
        "resource": celpy.json_to_cel(
            {"type": resource.type, "service": resource.service, "name": resource.name}
        )
    }
    try:
        result = _program(expression).evaluate(activation)
    except Exception:  # a condition that fails to evaluate grants nothing
        return False
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


def allows(
    bindings: Iterable[Mapping[str, Any]],
    role_permissions: Callable[[str], Collection[str]],
    member: str,
    permission: str,
    resource: Resource,
) -> bool:
    """Whether the policy's bindings give `member` `permission` on `resource`."""
    for binding in bindings:
        if member not in binding.get("members", ()):
            continue
        if permission not in role_permissions(binding["role"]):
            continue
        condition = binding.get("condition")
        if condition is None or condition_holds(condition["expression"], resource):
            return True
    return False


def granted(
    bindings: Iterable[Mapping[str, Any]],
    role_permissions: Callable[[str], Collection[str]],
    member: str,
    permissions: Iterable[str],
    resource: Resource,
) -> list[str]:
    """Those of `permissions` the policy gives `member` on `resource`: what
    testIamPermissions answers (https://cloud.google.com/iam/docs/testing-permissions)."""
    bindings = list(bindings)
    return [p for p in permissions if allows(bindings, role_permissions, member, p, resource)]


def predefined_or(custom: Mapping[str, Mapping[str, Any]]) -> Callable[[str], Collection[str]]:
    """Permissions of a role: predefined, else a custom role's includedPermissions."""

    def permissions(role: str) -> Collection[str]:
        if role in PREDEFINED_ROLES:
            return PREDEFINED_ROLES[role]
        return set(custom.get(role, {}).get("includedPermissions", []))

    return permissions
