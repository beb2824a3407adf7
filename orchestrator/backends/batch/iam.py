"""Who needs what to run a Batch job (pure; `bench setup` grants, `bench doctor` checks).

The job's service account reports its task's state to Batch and writes the task's logs; the
user who launches creates, reads and deletes jobs and acts as that account
(https://cloud.google.com/batch/docs/get-started#project-prerequisites, and the roles'
permissions: https://cloud.google.com/iam/docs/roles-permissions/batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.backends.gce.builder import vm_may_delete_itself
from orchestrator.backends.gce.iam import SELF_DELETE_ROLE_ID

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

# The job's VM account, on the project; each role with why, as `bench setup` prints it.
# roles/batch.agentReporter holds batch.states.report alone; roles/logging.logWriter holds
# logging.logEntries.create (https://cloud.google.com/iam/docs/roles-permissions/logging).
VM_ROLES = {
    "roles/batch.agentReporter": "its VMs report the task's state to Batch",
    "roles/logging.logWriter": "the task's output goes to Cloud Logging (the job's logsPolicy)",
}
# The user who launches: roles/batch.jobsEditor on the project, and
# roles/iam.serviceAccountUser on the job's account only (not the project's every account).
JOBS_EDITOR = "roles/batch.jobsEditor"
ACCOUNT_USER = "roles/iam.serviceAccountUser"
# What bench does with jobs (create, get, list, delete, and list a job's tasks), all of them
# in roles/batch.jobsEditor.
JOB_PERMISSIONS = [
    "batch.jobs.create",
    "batch.jobs.delete",
    "batch.jobs.get",
    "batch.jobs.list",
    "batch.tasks.list",
]


def job_account(config: BenchConfig) -> str | None:
    """The account the job's VMs run as: the configured one, None for Batch's default (the
    project's Compute Engine default service account)."""
    return config.service_account if vm_may_delete_itself(config) else None


def missing_vm_roles(policy: dict[str, Any], account: str) -> list[str]:
    """The VM_ROLES the project's policy does not grant `account` without a condition."""
    member = f"serviceAccount:{account}"
    held = {
        binding.get("role")
        for binding in policy.get("bindings", [])
        if member in binding.get("members", []) and not binding.get("condition")
    }
    return [role for role in VM_ROLES if role not in held]


def extra_vm_roles(policy: dict[str, Any], project: str, account: str) -> list[str]:
    """The roles the project's policy gives `account` beyond those bench grants it (VM_ROLES
    and gce's self-delete role): each is a Batch VM's, whose token has the cloud-platform
    scope (builder.JOB_SCOPES says why)."""
    member = f"serviceAccount:{account}"
    allowed = {*VM_ROLES, f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"}
    held = {
        binding.get("role", "")
        for binding in policy.get("bindings", [])
        if member in binding.get("members", [])
    }
    return sorted(held - allowed)


def remove_command(project: str, member: str, role: str) -> list[str]:
    """The gcloud line that takes a role (every binding of it) away from `member`
    (https://cloud.google.com/sdk/gcloud/reference/projects/remove-iam-policy-binding)."""
    return [
        *("gcloud", "projects", "remove-iam-policy-binding", project),
        f"--member={member}",
        f"--role={role}",
        "--all",
    ]


def grant_command(project: str, member: str, role: str) -> list[str]:
    """The gcloud line of a grant on the project; `--condition=None` says "no condition"
    without a prompt, which gcloud asks for when the policy holds conditional bindings
    (https://cloud.google.com/sdk/gcloud/reference/projects/add-iam-policy-binding)."""
    return [
        *("gcloud", "projects", "add-iam-policy-binding", project),
        f"--member={member}",
        f"--role={role}",
        "--condition=None",
    ]
