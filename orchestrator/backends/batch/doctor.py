"""`bench doctor` for Cloud Batch: the API answers in the job's region, you may create and
delete jobs, and the job's VM account holds the roles a task needs
(https://cloud.google.com/batch/docs/get-started#project-prerequisites). gce's checks run
before these: credentials, quota, the bucket, acting as the VM account."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import Check
from orchestrator.backends.batch.builder import ADDED_SCOPE, JOB_SCOPES, job_region
from orchestrator.backends.batch.iam import (
    JOB_PERMISSIONS,
    JOBS_EDITOR,
    VM_ROLES,
    extra_vm_roles,
    grant_command,
    job_account,
    missing_vm_roles,
    remove_command,
)
from orchestrator.errors import BenchError

if TYPE_CHECKING:
    from orchestrator.backends.batch.api import BatchApi
    from orchestrator.config import BenchConfig

SETUP_FIX = "run `bench setup --apply`"


def run_checks(config: BenchConfig, api: BatchApi) -> Iterator[Check]:
    from orchestrator.backends.gce.doctor import ask_iam
    from orchestrator.backends.gce.iam_api import IamApi

    api_check = batch_api_check(config, api)
    yield api_check
    if not api_check.ok:
        return
    iam, project = IamApi(config), config.project
    yield ask_iam(
        "Batch jobs", lambda: job_rights_check(project, iam.project_permissions(JOB_PERMISSIONS))
    )
    account = job_account(config)
    if account is None:
        yield default_account_check()
        return
    yield ask_iam("Batch VM roles", lambda: vm_roles_check(project, account, iam.project_policy()))


def batch_api_check(config: BenchConfig, api: BatchApi) -> Check:
    region = job_region(config)
    try:
        api.jobs(region)
    except BenchError as e:
        text = str(e)
        disabled = "SERVICE_DISABLED" in text or "has not been used" in text
        return Check(
            "Batch API",
            False,
            f"listing jobs in {region} failed: {text}",
            (
                f"gcloud services enable batch.googleapis.com --project {config.project}"
                if disabled
                else f"ask a project admin for {JOBS_EDITOR} on {config.project}"
            ),
        )
    return Check("Batch API", True, f"enabled: jobs in {region} can be listed")


def job_rights_check(project: str, held: set[str]) -> Check:
    """testIamPermissions on the project (https://cloud.google.com/iam/docs/testing-permissions):
    what bench does with jobs."""
    missing = [p for p in JOB_PERMISSIONS if p not in held]
    if not missing:
        return Check("Batch jobs", True, f"you may create, read and delete jobs in {project}")
    return Check(
        "Batch jobs",
        False,
        f"you lack {', '.join(missing)} in {project}",
        f"ask a project admin for {JOBS_EDITOR} on {project}",
    )


def vm_roles_check(project: str, account: str, policy: dict[str, Any]) -> Check:
    """The job's account holds Batch's roles, and none but bench's: a Batch VM's token has
    the cloud-platform scope, so each role of its account is the VM's (builder.JOB_SCOPES)."""
    member = f"serviceAccount:{account}"
    extra = extra_vm_roles(policy, project, account)
    if extra:
        commands = "; ".join(" ".join(remove_command(project, member, role)) for role in extra)
        return Check(
            "Batch VM roles",
            False,
            f"{account} also holds {', '.join(extra)} on {project}: Batch adds the "
            f"cloud-platform scope to the scopes a job names ({_scopes()}), so a run's code "
            "could use every one of them",
            commands,
        )
    missing = missing_vm_roles(policy, account)
    if not missing:
        return Check(
            "Batch VM roles",
            True,
            f"the job names {account} with {_scopes()}; it holds {', '.join(VM_ROLES)} on "
            f"{project} and no role but bench's",
        )
    why = "; ".join(f"{role}: {VM_ROLES[role]}" for role in missing)
    commands = "; ".join(" ".join(grant_command(project, member, role)) for role in missing)
    return Check(
        "Batch VM roles",
        False,
        f"{account} lacks {', '.join(missing)} on {project} ({why})",
        f"{SETUP_FIX} (for bench's own account), or: {commands}",
    )


def _scopes() -> str:
    named = ", ".join(scope.rsplit("/", 1)[-1] for scope in JOB_SCOPES)
    return f"scope {named}, and {ADDED_SCOPE.rsplit('/', 1)[-1]} that Batch adds"


def default_account_check() -> Check:
    return Check(
        "Batch VM roles",
        False,
        "service_account is the project's Compute Engine default account: Batch gives a job's "
        "VM the cloud-platform scope, so a run's code could use every role of that account "
        "(Editor, on most projects); launch refuses it",
        f"{SETUP_FIX}, then set service_account to the account it creates",
    )
