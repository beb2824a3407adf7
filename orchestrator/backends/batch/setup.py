"""`bench setup` for Cloud Batch: the roles a job's VM account needs, on the project.

gce's setup runs first and creates the VM account (`bench-vm@<project>`); these steps grant
it roles/batch.agentReporter and roles/logging.logWriter (iam.py says why each), with no
other scope: both are project-level roles. Who launches needs roles/batch.jobsEditor and
roles/iam.serviceAccountUser on that account alone; a project Owner (who runs setup) holds
both already, so setup names them for anyone else rather than granting them to a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.backends.base import SetupStep
from orchestrator.backends.batch.iam import (
    ACCOUNT_USER,
    JOBS_EDITOR,
    VM_ROLES,
    grant_command,
    missing_vm_roles,
)
from orchestrator.backends.gce.iam_api import IamApi
from orchestrator.backends.gce.setup import apply_step, vm_account_email
from orchestrator.errors import CloudError

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig


def setup_steps(project: str) -> list[SetupStep]:
    account = vm_account_email(project)
    member = f"serviceAccount:{account}"
    return [
        SetupStep(
            f"{role} for {account} on project {project}: {why}",
            grant_command(project, member, role),
            lambda client, role=role: client.grant_project_role(member, role),
            names_account=True,
        )
        for role, why in VM_ROLES.items()
    ]


def setup_steps_for(config: BenchConfig) -> list[SetupStep]:
    return setup_steps(config.project)


def setup_followups(config: BenchConfig) -> list[str]:
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
        policy = self.api.project_policy()
        account = member.removeprefix("serviceAccount:")
        if role not in missing_vm_roles(policy, account):
            return "granted already"
        bindings = [dict(b) for b in policy.get("bindings", [])]
        plain = next(
            (b for b in bindings if b.get("role") == role and not b.get("condition")), None
        )
        if plain is None:
            bindings.append({"role": role, "members": [member]})
        else:
            plain["members"] = [*plain.get("members", []), member]
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
