"""May this caller start bench's VMs, and may those VMs delete themselves? Pure check
builders over what IAM answered (testIamPermissions, the project's policy, the role), so
`bench doctor` says which grant is missing, and how to add it, before anything is paid for.
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.gce.iam import (
    SELF_DELETE_PERMISSIONS,
    SELF_DELETE_ROLE_ID,
    VM_ACCOUNT_ID,
    self_delete_condition,
)
from orchestrator.backends.gce.readiness import Check

CREATE_PERMISSION = "compute.instances.create"
ACT_AS_PERMISSION = "iam.serviceAccounts.actAs"
SETUP_FIX = "run `bench setup --apply`"


def create_check(project: str, held: set[str]) -> Check:
    """instances.insert needs compute.instances.create on the project
    (https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert)."""
    name = "create VMs"
    if CREATE_PERMISSION in held:
        return Check(name, True, f"you hold {CREATE_PERMISSION} in {project}")
    return Check(
        name,
        False,
        f"you lack {CREATE_PERMISSION} in {project}: every launch would be refused",
        f"ask a project admin for roles/compute.instanceAdmin.v1 on {project} "
        "(https://cloud.google.com/compute/docs/access/iam)",
    )


def act_as_check(account: str, held: set[str] | None) -> Check:
    """Starting a VM that runs as a service account needs iam.serviceAccounts.actAs on it
    (https://cloud.google.com/iam/docs/service-accounts-actas). `held`: None when the
    account does not exist."""
    name = "act as the VM account"
    if held is None:
        return Check(name, False, f"service account {account} does not exist", SETUP_FIX)
    if ACT_AS_PERMISSION in held:
        return Check(name, True, f"you may start VMs that run as {account}")
    return Check(
        name,
        False,
        f"you lack {ACT_AS_PERMISSION} on {account}: Compute would refuse the VM",
        f"gcloud iam service-accounts add-iam-policy-binding {account} "
        "--member=user:YOUR_EMAIL --role=roles/iam.serviceAccountUser",
    )


def default_account_check(allow_leftover_disk: bool) -> Check:
    name = "VM self-delete"
    if allow_leftover_disk:
        return Check(
            name,
            True,
            "the default account cannot delete its VM: a finished VM powers off and its disk "
            "bills until bench deletes it (allow_leftover_disk is on)",
        )
    return Check(
        name,
        False,
        "the default account cannot delete its VM: a finished VM would power off and its disk "
        "bill until bench deletes it, so launch refuses it",
        f'{SETUP_FIX}, then set service_account = "{VM_ACCOUNT_ID}@<project>.iam.'
        'gserviceaccount.com" in bench.toml',
    )


def self_delete_check(
    project: str, account: str, policy: dict[str, Any], role: dict[str, Any] | None
) -> Check:
    """The binding `bench setup` makes: its role, for this account, under the condition on
    bench-* instances and disks; and that role holding both permissions."""
    name = "VM self-delete"
    role_name = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
    member = f"serviceAccount:{account}"
    bindings = [
        b
        for b in policy.get("bindings", [])
        if b.get("role") == role_name and member in b.get("members", [])
    ]
    if not bindings:
        return Check(
            name,
            False,
            f"{account} holds no {role_name} on {project}: its VMs would power off and their "
            "disks bill until bench deletes them",
            SETUP_FIX,
        )
    wanted = self_delete_condition(project)
    if not any((b.get("condition") or {}).get("expression") == wanted for b in bindings):
        return Check(
            name,
            False,
            f"{account}'s {role_name} binding has another condition than bench's (an older "
            "setup's)",
            f"{SETUP_FIX} (it replaces the binding)",
        )
    missing = sorted(
        set(SELF_DELETE_PERMISSIONS) - set((role or {}).get("includedPermissions", []))
    )
    if missing:
        return Check(
            name,
            False,
            f"{role_name} lacks {', '.join(missing)}: deleting a VM deletes its boot disk too",
            f"{SETUP_FIX} (it updates the role)",
        )
    return Check(
        name,
        True,
        f"{account} may delete instances and disks named bench-* in {project}, nothing else",
    )
