"""A thin adapter over the Compute Engine REST client: the only module that calls the API.

Every call goes through `_call`, which turns google.api_core exceptions into bench errors
(gce/errors.py). Operations are polled with our own ZoneOperationsClient because
`ExtendedOperation.result()` builds one without our endpoint (facts/gce.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.backends.gce.adaptor import (
    api_exceptions,
    auth_credentials,
    auth_exceptions,
    client_options,
    compute_v1,
)
from orchestrator.backends.gce.errors import (
    ComputeUnreachable,
    call_google,
    transient_read_retry,
    translate,
)
from orchestrator.errors import BenchError, CloudError, ConfigError

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Instance, Operation, SerialPortOutput

    from orchestrator.config import BenchConfig

T = TypeVar("T")
log = logging.getLogger(__name__)

# Reads are idempotent: retry 429/5xx and dropped connections for a bounded time instead of
# the client's 600 s (a laptop's network blip must not end `--wait` or `stop-all`).
READ_RETRY_SECONDS = 60.0
HTTP_TIMEOUT_SECONDS = 60.0
# zoneOperations.wait "waits for no more than the 2 minutes" and may answer before DONE
# (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait): our read
# timeout must outlast it, and a wait that times out anyway only means "still running".
OPERATION_WAIT_SERVER_SECONDS = 120.0
OPERATION_WAIT_HTTP_TIMEOUT_SECONDS = OPERATION_WAIT_SERVER_SECONDS + 30.0
# The stated deadline for one operation (insert, delete): polling goes on until then.
OPERATION_TIMEOUT_SECONDS = 900.0
# An insert whose answer was lost is sent again with the same requestId, which GCE answers
# with the first operation instead of creating a second VM.
INSERT_ATTEMPTS = 4
# Concurrent requests `stop` may have in flight (GCE's per-project rate limits are far above).
PARALLEL_CALLS = 32
# Where the client goes without `compute_endpoint`; only named in error messages.
DEFAULT_COMPUTE_ENDPOINT = "https://compute.googleapis.com"


class ComputeApi:
    """Instances in one project; built lazily so constructing it costs no import or auth."""

    def __init__(
        self,
        config: BenchConfig,
        *,
        read_retry_seconds: float = READ_RETRY_SECONDS,
        operation_timeout_seconds: float = OPERATION_TIMEOUT_SECONDS,
        wait_http_timeout: float = OPERATION_WAIT_HTTP_TIMEOUT_SECONDS,
    ) -> None:
        if not config.project:
            raise ConfigError("the gce backend needs a project: set `project` in bench.toml")
        self.project: str = config.project
        self._endpoint = config.compute_endpoint
        self._read_retry_seconds = read_retry_seconds
        self._operation_timeout_seconds = operation_timeout_seconds
        self._wait_http_timeout = wait_http_timeout
        self._clients: dict[str, Any] = {}  # read_resource's clients, by class name

    # -- clients -----------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        if self._endpoint:
            # A loopback stand-in: plain HTTP, no credentials.
            return {
                "transport": "rest",
                "client_options": client_options.ClientOptions(api_endpoint=self._endpoint),
                "credentials": auth_credentials.AnonymousCredentials(),
            }
        return {"transport": "rest"}

    def _make(self, factory: Callable[..., T]) -> T:
        try:
            return factory(**self._client_kwargs())
        except auth_exceptions.DefaultCredentialsError as e:
            raise ConfigError(
                # One message for every command that meets it (not all of them take
                # --backend: stop-all and doctor do not).
                f"no Google credentials found ({e}); run `gcloud auth application-default login`"
            ) from None

    @cached_property
    def instances(self):
        return _widen_pool(self._make(compute_v1.InstancesClient))

    @cached_property
    def operations(self):
        return _widen_pool(self._make(compute_v1.ZoneOperationsClient))

    @cached_property
    def _read_retry(self):
        return transient_read_retry(self._read_retry_seconds)

    def _call(self, fn: Callable[[], T], zone: str | None = None) -> T:
        """Run one API call; whatever goes wrong leaves here as a bench error."""
        return call_google(
            fn,
            lambda e: translate(e, project=self.project, zone=zone),
            retried_error=lambda e: translate(e, project=self.project),
            endpoint=self._endpoint_name,
        )

    @property
    def _endpoint_name(self) -> str:
        return self._endpoint or DEFAULT_COMPUTE_ENDPOINT

    def _read(self, method: Callable[..., T], **request: Any) -> T:
        # No zone for translate: a read's 503 is a transient, never a stockout.
        return self._call(
            lambda: method(request=request, retry=self._read_retry, timeout=HTTP_TIMEOUT_SECONDS)
        )

    def read_resource(self, client_name: str, method: str, **request: Any) -> Any | None:
        """One read through any compute_v1 client (e.g. "RegionsClient", "get"), retried
        like every read; None when the API says 404."""
        if client_name not in self._clients:
            self._clients[client_name] = self._make(getattr(compute_v1, client_name))
        call = getattr(self._clients[client_name], method)
        try:
            return self._read(call, **request)
        except BenchError as e:
            if _is_not_found(e):
                return None
            raise

    # -- operations --------------------------------------------------------------------

    def wait(self, zone: str, operation: Operation) -> None:
        """Block until the operation is DONE or the stated deadline passes; raise its error
        as a bench error."""
        deadline = time.monotonic() + self._operation_timeout_seconds
        while operation.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise CloudError(
                    f"operation {operation.name} in {zone} still not done after "
                    f"{self._operation_timeout_seconds:.0f} s; check the Cloud Console"
                )
            operation = self._wait_once(zone, operation)
        self._raise_if_failed(zone, operation)

    def _wait_once(self, zone: str, operation: Operation) -> Operation:
        """One zoneOperations.wait: the operation as GCE sees it now, DONE or not."""
        try:
            return self._call(
                lambda: self.operations.wait(
                    project=self.project,
                    zone=zone,
                    operation=operation.name,
                    retry=self._read_retry,
                    timeout=self._wait_http_timeout,
                )
            )
        except ComputeUnreachable as e:
            import requests

            if isinstance(e.__cause__, requests.ReadTimeout):
                return operation  # the server held the call past our timeout: still running
            raise

    def _raise_if_failed(self, zone: str, operation: Operation) -> None:
        errors = list(operation.error.errors) if operation.error else []
        if not errors and not operation.http_error_status_code:
            return
        message = operation.http_error_message or "; ".join(e.message for e in errors)
        exc = api_exceptions.from_http_status(
            operation.http_error_status_code or 500, message, errors=errors
        )
        raise translate(exc, project=self.project, zone=zone) from exc

    # -- instances ---------------------------------------------------------------------

    def insert(self, zone: str, instance: Instance) -> None:
        """Create the instance and wait until GCE has placed it (or said why not)."""
        self.wait(zone, self._send_insert(zone, instance, str(uuid.uuid4())))

    def _send_insert(self, zone: str, instance: Instance, request_id: str) -> Operation:
        """POST the insert; when no answer comes, send it again with the same requestId:
        GCE answers a repeat with the first operation, so there is never a second VM."""
        for attempt in range(1, INSERT_ATTEMPTS + 1):
            try:
                return self._call(
                    lambda: self.instances.insert_unary(
                        request=compute_v1.InsertInstanceRequest(
                            project=self.project,
                            zone=zone,
                            instance_resource=instance,
                            request_id=request_id,
                        ),
                        timeout=HTTP_TIMEOUT_SECONDS,
                    ),
                    zone,
                )
            except ComputeUnreachable as e:
                if _never_connected(e.__cause__) or attempt == INSERT_ATTEMPTS:
                    lost = e
                    break
                log.info(
                    "insert of %s got no answer; re-sending (requestId %s)",
                    instance.name,
                    request_id,
                )
                time.sleep(min(2.0**attempt, 8.0))
        if _never_connected(lost.__cause__):
            raise lost
        raise ComputeUnreachable(
            f"{lost}. If a request got through, {instance.name} exists in {zone}: "
            "`bench status` and `bench stop-all --dry-run` list it"
        ) from lost.__cause__

    def get(self, zone: str, name: str) -> Instance | None:
        """The instance, or None when it does not exist (deleted, never created)."""
        try:
            return self._read(self.instances.get, project=self.project, zone=zone, instance=name)
        except BenchError as e:
            if _is_not_found(e):
                return None
            raise

    def delete(self, zone: str, name: str) -> bool:
        """Delete the instance and wait; False when it was already gone (idempotent)."""
        return self._finish(zone, self.start_delete(zone, name))

    def start_delete(self, zone: str, name: str) -> Operation | None:
        """Ask for the delete without waiting; None when the instance is already gone."""
        return self._start(self.instances.delete_unary, zone, name)

    def finish(self, zone: str, operation: Operation | None) -> bool:
        """Wait for an operation from start_delete; False when the instance was gone."""
        return self._finish(zone, operation)

    def _start(self, method: Callable[..., Operation], zone: str, name: str) -> Operation | None:
        try:
            return self._call(
                lambda: method(
                    project=self.project, zone=zone, instance=name, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        except BenchError as e:
            if _is_not_found(e):
                return None  # already gone: that is what we wanted
            raise

    def _finish(self, zone: str, operation: Operation | None) -> bool:
        if operation is None:
            return False
        try:
            self.wait(zone, operation)
        except BenchError as e:
            if _is_not_found(e):
                return False
            raise
        return True

    def list_instances(self, filter_: str) -> list[tuple[str, Instance]]:
        """(zone, instance) for every instance in every zone that matches the filter."""
        request = compute_v1.AggregatedListInstancesRequest(
            project=self.project, filter=filter_, max_results=500
        )

        def collect() -> list[tuple[str, Instance]]:
            found = []
            pages = self.instances.aggregated_list(
                request=request, retry=self._read_retry, timeout=HTTP_TIMEOUT_SECONDS
            )
            for scope, scoped in pages:
                for instance in scoped.instances:
                    found.append((scope.removeprefix("zones/"), instance))
            return found

        return self._call(collect)

    def serial_output(self, zone: str, name: str, start: int) -> SerialPortOutput | None:
        """Serial port 1 from byte `start`; None when the instance is gone or not readable
        (GCE answers 400 "not ready" while it boots and once it is TERMINATED)."""
        try:
            return self._read(
                self.instances.get_serial_port_output,
                project=self.project,
                zone=zone,
                instance=name,
                port=1,
                start=start,
            )
        except BenchError as e:
            if _is_not_found(e) or _is_not_ready(e):
                return None
            raise


def _widen_pool(client: T) -> T:
    """Let `stop` run PARALLEL_CALLS requests at once over one client.

    requests keeps 10 connections per host; more threads would open and drop extra ones
    (with a warning each). The transport does not expose its session, hence the probe.
    """
    session = getattr(getattr(client, "_transport", None), "_session", None)
    if session is not None and hasattr(session, "mount"):
        from requests.adapters import HTTPAdapter

        for scheme in ("https://", "http://"):
            session.mount(scheme, HTTPAdapter(pool_connections=4, pool_maxsize=PARALLEL_CALLS))
    return client


def _never_connected(error: BaseException | None) -> bool:
    """True when the request cannot have reached the server: no connection was made."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError

    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = getattr(error.args[0], "reason", None) if error and error.args else None
    # NewConnectionError (refused, DNS) is a ConnectTimeoutError in urllib3.
    return isinstance(error, requests.ConnectionError) and isinstance(reason, ConnectTimeoutError)


def _is_not_ready(error: BenchError) -> bool:
    cause = error.__cause__
    return isinstance(cause, api_exceptions.BadRequest) and (
        "not ready" in str(cause).lower() or "RESOURCE_NOT_READY" in str(cause.errors)
    )


def _is_not_found(error: BenchError) -> bool:
    """True when the API said 404: the instance (or its operation) no longer exists."""
    return isinstance(error.__cause__, api_exceptions.NotFound)
