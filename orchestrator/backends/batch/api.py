"""A thin adapter over the Cloud Batch REST client: the only module that calls the API.

Every call goes through `_call`, which turns google.api_core exceptions into bench errors
(gce/errors.py's translation: a 403, a 404, a quota are the same errors on either API).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.backends.batch.adaptor import batch_v1
from orchestrator.backends.batch.iam import ACCOUNT_USER, JOBS_EDITOR
from orchestrator.backends.gce.adaptor import (
    api_exceptions,
    auth_credentials,
    auth_exceptions,
    client_options,
)
from orchestrator.backends.gce.errors import (
    LAUNCHER_ROLES,
    call_google,
    transient_read_retry,
    translate,
)
from orchestrator.errors import BenchError, ConfigError

if TYPE_CHECKING:
    from google.cloud.batch_v1 import Job, Task

    from orchestrator.config import BenchConfig

T = TypeVar("T")
DEFAULT_BATCH_ENDPOINT = "https://batch.googleapis.com"
HTTP_TIMEOUT_SECONDS = 60.0
READ_RETRY_SECONDS = 60.0
# A job's delete is a long-running operation; stop-all waits this long for each.
DELETE_TIMEOUT_SECONDS = 300.0
# What a refused launch needs here, and where it comes from.
BATCH_LAUNCHER_ROLES = (
    f"{JOBS_EDITOR} on the project and {ACCOUNT_USER} on the job's service account "
    "(bench setup --apply --launcher user:YOUR_EMAIL grants both)"
)


class BatchApi:
    """Jobs of one project; the client is made on first use (no import, no auth before)."""

    def __init__(self, config: BenchConfig) -> None:
        if not config.project:
            raise ConfigError("the batch backend needs a project: set `project` in bench.toml")
        self.project: str = config.project
        self._endpoint = config.batch_endpoint

    @cached_property
    def client(self):
        kwargs: dict[str, Any] = {"transport": "rest"}
        if self._endpoint:
            # A loopback stand-in: plain HTTP, no credentials.
            kwargs.update(
                client_options=client_options.ClientOptions(api_endpoint=self._endpoint),
                credentials=auth_credentials.AnonymousCredentials(),
            )
        try:
            return batch_v1.BatchServiceClient(**kwargs)
        except auth_exceptions.DefaultCredentialsError as e:
            raise ConfigError(
                f"no Google credentials found ({e}); run `gcloud auth application-default login`"
            ) from None

    @cached_property
    def _read_retry(self):
        return transient_read_retry(READ_RETRY_SECONDS)

    def _call(self, fn: Callable[[], T]) -> T:
        return call_google(
            fn, lambda e: _batch_error(e, self.project), endpoint=self._endpoint_name
        )

    @property
    def _endpoint_name(self) -> str:
        return self._endpoint or DEFAULT_BATCH_ENDPOINT

    # -- jobs ----------------------------------------------------------------------------

    def create(self, parent: str, job_id: str, job: Job, request_id: str) -> Job:
        """jobs.create; `request_id` makes a resent create (a lost answer) the same job."""
        return self._call(
            lambda: self.client.create_job(
                request=batch_v1.CreateJobRequest(
                    parent=parent, job_id=job_id, job=job, request_id=request_id
                ),
                timeout=HTTP_TIMEOUT_SECONDS,
            )
        )

    def get(self, name: str) -> Job | None:
        """The job, or None once it is gone (404)."""
        try:
            return self._call(
                lambda: self.client.get_job(
                    name=name, retry=self._read_retry, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        except api_exceptions.NotFound:
            return None
        except Exception as e:  # translated: a 404 is "gone", anything else is raised
            if isinstance(e.__cause__, api_exceptions.NotFound):
                return None
            raise

    def tasks(self, job_name: str) -> list[Task]:
        parent = f"{job_name}/taskGroups/group0"
        return list(
            self._call(
                lambda: self.client.list_tasks(
                    parent=parent, retry=self._read_retry, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        )

    def regions(self) -> list[str]:
        """Every location of the project that Batch serves (stop-all looks in each)."""
        from google.cloud.location import locations_pb2

        response = self._call(
            lambda: self.client.list_locations(
                request=locations_pb2.ListLocationsRequest(name=f"projects/{self.project}"),
                retry=self._read_retry,
                timeout=HTTP_TIMEOUT_SECONDS,
            )
        )
        return sorted(location.location_id for location in response.locations)

    def jobs(self, region: str) -> list[Job]:
        parent = f"projects/{self.project}/locations/{region}"
        return list(
            self._call(
                lambda: self.client.list_jobs(
                    parent=parent, retry=self._read_retry, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        )

    def delete(self, name: str, reason: str) -> bool:
        """Delete the job (its VMs with it) and wait; False when it was gone already."""
        try:
            operation = self._call(
                lambda: self.client.delete_job(
                    request=batch_v1.DeleteJobRequest(name=name, reason=reason),
                    timeout=HTTP_TIMEOUT_SECONDS,
                )
            )
        except Exception as e:
            if isinstance(e.__cause__, api_exceptions.NotFound):
                return False
            raise
        self._call(lambda: operation.result(timeout=DELETE_TIMEOUT_SECONDS))
        return True


def _batch_error(exc: Exception, project: str) -> BenchError:
    """gce's translation of an API error (the same codes mean the same on Batch), naming the
    API that answered and, on a refusal, the roles a Batch launch needs (batch/iam.py)."""
    error = translate(exc, project=project)
    text = str(error).replace("Compute Engine", "Cloud Batch")
    text = text.replace(LAUNCHER_ROLES, BATCH_LAUNCHER_ROLES)
    try:
        return type(error)(text)
    except TypeError:  # an error class built from parts: keep it as it is
        return error
