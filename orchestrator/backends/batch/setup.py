"""`bench setup` for Cloud Batch: the roles a job's VM account needs, on the project.

gce's setup runs first and creates the VM account (`bench-vm@<project>`); these steps grant
it roles/batch.agentReporter and roles/logging.logWriter (iam.py says why each), with no
other scope: both are project-level roles. Who launches needs roles/batch.jobsEditor on the
project (a job is created in it) and roles/iam.serviceAccountUser on that account alone, in
the account's own policy (https://cloud.google.com/batch/docs/create-run-job-custom-service-account):
setup grants both to each `--launcher` (the members gce's setup lets sign as its signer); with
none named it says what to run for anyone who is not a project Owner (an Owner holds both),
rather than granting them to a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.backends.base import SetupStep
from orchestrator.backends.batch.iam import (
    ACCOUNT_USER,
    JOBS_EDITOR,
    VM_ROLES,
    grant_command,
)
from orchestrator.backends.gce.iam_api import IamApi
from orchestrator.backends.gce.setup import apply_step, grant_on_account, vm_account_email
from orchestrator.errors import CloudError

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig


def setup_steps(project: str, launchers: Sequence[str] = ()) -> list[SetupStep]:
    """The VM account's roles, then each launcher's two grants (`launchers`: checked IAM
    members, gce's setup.launchers_for)."""
    account = vm_account_email(project)
    member = f"serviceAccount:{account}"
    return [
        *(
            SetupStep(
                f"{role} for {account} on project {project}: {why}",
                grant_command(project, member, role),
                lambda client, role=role: client.grant_project_role(member, role),
                names_account=True,
            )
            for role, why in VM_ROLES.items()
        ),
        *(step for launcher in launchers for step in launcher_steps(project, launcher)),
    ]


def launcher_steps(project: str, member: str) -> list[SetupStep]:
    """What `member` needs to launch a Batch job as bench's VM account: jobs on the project,
    and acting as that account alone (its own policy, not the project's)."""
    account = vm_account_email(project)
    return [
        SetupStep(
            f"{JOBS_EDITOR} for {member} on project {project}: `bench launch` as {member} "
            "creates, reads and deletes Batch jobs",
            grant_command(project, member, JOBS_EDITOR),
            lambda client: client.grant_project_role(member, JOBS_EDITOR),
        ),
        SetupStep(
            f"{ACCOUNT_USER} for {member} on {account} only: its Batch jobs run as that account",
            [
                *("gcloud", "iam", "service-accounts", "add-iam-policy-binding", account),
                f"--project={project}",
                f"--member={member}",
                f"--role={ACCOUNT_USER}",
            ],
            lambda client: grant_on_account(client.api, account, member, ACCOUNT_USER),
            names_account=True,
        ),
    ]


def setup_steps_for(config: BenchConfig, launchers: Sequence[str] = ()) -> list[SetupStep]:
    return setup_steps(config.project, launchers)


def setup_followups(config: BenchConfig, launchers: Sequence[str] = ()) -> list[str]:
    """With launchers named, their grants are setup's steps: nothing to do by hand."""
    if launchers:
        return []
    account = vm_account_email(config.project)
    return [
        f"for Cloud Batch, whoever launches (if not a project Owner) needs {JOBS_EDITOR} on "
        f"{config.project} and {ACCOUNT_USER} on {account} only: "
        f"gcloud projects add-iam-policy-binding {config.project} --member=user:EMAIL "
        f"--role={JOBS_EDITOR} --condition=None; gcloud iam service-accounts "
        f"add-iam-policy-binding {account} --member=user:EMAIL --role={ACCOUNT_USER}",
    ]


class BatchSetupClient:
    """The calls `--apply` makes: project-level grants, each left alone when it exists."""

    def __init__(self, config: BenchConfig) -> None:
        self.api = IamApi(config)

    def grant_project_role(self, member: str, role: str) -> str:
        """`member` holds `role` on the project, in a binding with no condition."""
        policy = self.api.project_policy()
        bindings = [dict(b) for b in policy.get("bindings", [])]
        plain = [b for b in bindings if b.get("role") == role and not b.get("condition")]
        if any(member in b.get("members", []) for b in plain):
            return "granted already"
        if not plain:
            bindings.append({"role": role, "members": [member]})
        else:
            plain[0]["members"] = [*plain[0].get("members", []), member]
        # Version 3 keeps the conditional bindings gce's setup made; the etag makes a
        # concurrent change fail (409) rather than be overwritten.
        if not self.api.set_project_policy({**policy, "version": 3, "bindings": bindings}):
            raise CloudError("the project's IAM policy changed meanwhile; run setup again")
        return "granted"


def apply_setup(
    config: BenchConfig,
    steps: list[SetupStep],
    on_done: Callable[[SetupStep, str], None],
    on_wait: Callable[[SetupStep, float], None],
) -> None:
    client = BatchSetupClient(config)
    for step in steps:
        on_done(step, apply_step(step, client, on_wait))
