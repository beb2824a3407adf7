"""`bench doctor` for Cloud Batch: the API answers in the job's region, and which roles a run
needs (https://cloud.google.com/batch/docs/get-started#project-prerequisites)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from orchestrator.backends.base import Check
from orchestrator.backends.batch.builder import job_region
from orchestrator.errors import BenchError

if TYPE_CHECKING:
    from orchestrator.backends.batch.api import BatchApi
    from orchestrator.config import BenchConfig

# Who needs what to run a job (https://cloud.google.com/batch/docs/get-started): the user
# creates and deletes jobs and acts as the job's service account; that account reports the
# task's state to Batch and writes its logs.
USER_ROLES = ("roles/batch.jobsEditor", "roles/iam.serviceAccountUser")
VM_ROLES = ("roles/batch.agentReporter", "roles/logging.logWriter")


def run_checks(config: BenchConfig, api: BatchApi) -> Iterator[Check]:
    region = job_region(config)
    try:
        api.jobs(region)
    except BenchError as e:
        text = str(e)
        disabled = "SERVICE_DISABLED" in text or "has not been used" in text
        yield Check(
            "Batch API",
            False,
            f"listing jobs in {region} failed: {text}",
            (
                f"gcloud services enable batch.googleapis.com --project {config.project}"
                if disabled
                else f"grant yourself {' and '.join(USER_ROLES)} on project {config.project}"
            ),
        )
        return
    yield Check("Batch API", True, f"enabled: jobs in {region} can be listed")
    account = config.service_account
    yield Check(
        "Batch roles",
        True,
        f"a run's VM ({account}) needs {', '.join(VM_ROLES)}; you need {', '.join(USER_ROLES)}",
    )
