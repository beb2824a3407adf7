"""Loopback stand-in for the Cloud Batch v1 REST API subset bench uses, driven by the real
google-cloud-batch client (transport="rest", api_endpoint=server.endpoint, anonymous):

  GET    /v1/projects/{p}/locations                                   locations.list
  POST   /v1/projects/{p}/locations/{l}/jobs?jobId=..&requestId=..    jobs.create
  GET    /v1/projects/{p}/locations/{l}/jobs                          jobs.list
  GET    /v1/projects/{p}/locations/{l}/jobs/{j}                      jobs.get
  DELETE /v1/projects/{p}/locations/{l}/jobs/{j}?reason=..            jobs.delete
  GET    /v1/projects/{p}/locations/{l}/jobs/{j}/taskGroups/group0/tasks   tasks.list

Every request (query and body) and every 200 answer is checked against the batch v1
discovery document (discovery.py); what does not fit lands in `schema_violations` (400 for a
request, as the API answers; 500 for an answer: a stand-in bug) and fails the test at stop().
Jobs run their task as batch_tasks.py says (the script in a VmSandbox, with a metadata
server for its token and machine facts). Faults: `stockout(region)`, `preempt(job_id,
after_s)`, `fail_delete(job_id)`.

IAM, as the compute stand-in checks it: a request without Authorization is the controller
(`iam_policy.CONTROLLER_MEMBER`, a new project's owner), one with `Bearer fake-token-<VM>` is
that job VM's service account; each needs its method's permission under the project's policy
(`self.iam`, the compute stand-in's `ProjectIam` or the IAM stand-in: the `batch` fixture
shares one), conditions evaluated (iam_policy.py); with the IAM stand-in, a request without a
token is its `caller` (a test may launch as someone other than the owner), and a permission on
a service account is held through that account's own policy too
(https://cloud.google.com/iam/docs/manage-access-service-accounts). The methods' permissions
are their reference pages' (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs/create
and the others: batch.jobs.create, .get, .list, .delete, batch.tasks.list,
batch.locations.list); creating a job also needs iam.serviceAccounts.actAs on the job's
service account, "Service Account User (roles/iam.serviceAccountUser) on the job's service
account" (https://cloud.google.com/batch/docs/create-run-job-custom-service-account). A
refusal is 403 PERMISSION_DENIED, the API's answer to a missing permission
(https://cloud.google.com/apis/design/errors#handling_errors). A job's VM runs as the job's
`allocationPolicy.serviceAccount` (the project's Compute Engine default account when none is
named) with the scopes the job names and cloud-platform, "added by default"
(ServiceAccount.scopes,
https://cloud.google.com/dotnet/docs/reference/Google.Cloud.Batch.V1/2.7.0/Google.Cloud.Batch.V1.ServiceAccount);
`identity_of_token` tells the bucket proxy (gcs_proxy.py) who a VM's token is.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
import uuid
from typing import Any

from ..limits import HANG_SECONDS
from . import discovery
from .batch_tasks import FakeJob, TaskRunner, now_rfc3339, vm_account
from .compute_server import ProjectIam
from .http_base import JsonHandler, LoopbackStandIn
from .iam_policy import Resource, allows, predefined_or
from .metadata_server import VM_TOKEN_PREFIX, MetadataServer, TokenIdentity
from .peer_process import session_of_peer

_JOBS = re.compile(r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/jobs$")
_JOB = re.compile(r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/jobs/(?P<j>[^/]+)$")
_TASKS = re.compile(
    r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/jobs/(?P<j>[^/]+)"
    r"/taskGroups/group0/tasks$"
)
_LOCATIONS = re.compile(r"^/v1/projects/(?P<p>[^/]+)/locations$")
# Job ids: "1-63 characters, lowercase letters, numbers, and hyphens; start with a letter,
# not end with a hyphen" (https://cloud.google.com/batch/docs/create-run-job#create-basic-job,
# the job name rule; the Job resource's name field).
_JOB_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def proto_json(body: Any, message: str) -> Any:
    """The body with enums by name. The REST clients ask `$alt=json;enum-encoding=int` and
    send enums as numbers, which proto3's JSON parsers accept beside names
    (https://protobuf.dev/programming-guides/json/, "Enum"); the discovery document lists
    names, so the body is read as the API reads it (the published batch v1 protos) first."""
    if not isinstance(body, dict):
        return body
    from google.cloud import batch_v1
    from google.protobuf import json_format

    parsed = getattr(batch_v1, message).pb()()
    try:
        json_format.ParseDict(body, parsed)
    except json_format.ParseError as e:
        raise _bad(f"Invalid JSON payload received. {e}") from e
    return json_format.MessageToDict(parsed)


class BatchApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _bad(message: str) -> BatchApiError:
    return BatchApiError(400, "INVALID_ARGUMENT", message)


# Each method's IAM permission (its reference page).
PERMISSIONS = {
    "projects.locations.list": "batch.locations.list",
    "projects.locations.jobs.create": "batch.jobs.create",
    "projects.locations.jobs.list": "batch.jobs.list",
    "projects.locations.jobs.get": "batch.jobs.get",
    "projects.locations.jobs.delete": "batch.jobs.delete",
    "projects.locations.jobs.taskGroups.tasks.list": "batch.tasks.list",
}


def _refused(permission: str, resource: str) -> BatchApiError:
    return BatchApiError(
        403, "PERMISSION_DENIED", f"Permission '{permission}' denied on '{resource}'"
    )


def check_create(job: dict[str, Any], region: str) -> None:
    """What jobs.create refuses beyond the schema, each rule with its page."""
    groups = job.get("taskGroups") or []
    # "Required. TaskGroups in the Job. Only one TaskGroup is supported now."
    # (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs#Job)
    if len(groups) != 1:
        raise _bad(f"exactly one task group is supported, got {len(groups)}")
    spec = groups[0].get("taskSpec") or {}
    if not spec.get("runnables"):
        raise _bad("taskSpec.runnables is required")
    # maxRetryCount: "The valid value range is [0, 10]" (TaskSpec, same page).
    if not 0 <= int(spec.get("maxRetryCount", 0)) <= 10:
        raise _bad("maxRetryCount must be in [0, 10]")
    # Batch's own exit codes are 50001-50006; a lifecycle policy names codes to act on
    # (https://cloud.google.com/batch/docs/automate-task-retries).
    for policy in spec.get("lifecyclePolicies") or []:
        if policy.get("action") not in ("RETRY_TASK", "FAIL_TASK"):
            raise _bad("lifecyclePolicies[].action must be RETRY_TASK or FAIL_TASK")
    allocation = job.get("allocationPolicy") or {}
    instances = allocation.get("instances") or []
    # "Only instances[0] is supported now" (AllocationPolicy.instances).
    if len(instances) != 1:
        raise _bad("allocationPolicy.instances must hold one entry")
    # allowedLocations: "regions/us-central1" or "zones/us-central1-a"; every one must be in
    # the job's region (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs#LocationPolicy).
    for location in (allocation.get("location") or {}).get("allowedLocations") or []:
        kind, _, where = location.partition("/")
        if kind not in ("zones", "regions") or not where.startswith(region):
            raise _bad(f"allowed location {location!r} is not in the job's region {region}")


class _BatchHandler(JsonHandler):
    def handle_request(self) -> None:
        server: FakeBatchServer = self.server.owner  # type: ignore[attr-defined]
        try:
            name, status, answer = self._route(server)
        except BatchApiError as e:
            self.reply_json(
                e.status, {"error": {"code": e.status, "message": e.message, "status": e.reason}}
            )
            return
        if name:
            try:
                discovery.validate_response("batch", "v1", name, answer)
            except discovery.DiscoveryError as e:
                server.schema_violations.append(f"answer of {name}: {e}")
                self.reply_json(500, {"error": {"code": 500, "message": str(e)}})
                return
        self.reply_json(status, answer)

    def _validated(self, server: FakeBatchServer, name: str, body: Any) -> None:
        query = {k: v for k, v in self.query.items() if k != "$alt"}
        try:
            discovery.validate_call("batch", "v1", name, query, body)
        except discovery.DiscoveryError as e:
            server.schema_violations.append(f"request {name}: {e}")
            raise _bad(str(e)) from e
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        resource = self.url_path[len("/v1/") :]
        if name == "projects.locations.jobs.create":
            resource = f"{resource}/{self.query.get('jobId', '')}"
        server.authorize(name, resource, body, token)

    def _route(self, server: FakeBatchServer) -> tuple[str, int, Any]:
        path, verb = self.url_path, self.command
        server.requests.append((verb, path))
        if server.api_disabled and not path.startswith("/_fake/"):
            # What an API that was never enabled answers: 403 PERMISSION_DENIED with reason
            # SERVICE_DISABLED (https://cloud.google.com/apis/design/errors#error_info, and
            # https://cloud.google.com/service-usage/docs/enable-disable).
            raise BatchApiError(
                403,
                "PERMISSION_DENIED",
                f"Cloud Batch API has not been used in project {server.project} before or it "
                "is disabled. SERVICE_DISABLED",
            )
        if verb == "POST" and path == "/_fake/poweroff":
            return "", 200, {}
        if (m := _LOCATIONS.match(path)) and verb == "GET":
            self._validated(server, "projects.locations.list", None)
            return "projects.locations.list", 200, server.locations(m["p"])
        if (m := _JOBS.match(path)) and verb == "POST":
            body = proto_json(self.json_body(), "Job")
            self._validated(server, "projects.locations.jobs.create", body)
            return (
                "projects.locations.jobs.create",
                200,
                server.create(m["p"], m["l"], self.query, body),
            )
        if (m := _JOBS.match(path)) and verb == "GET":
            self._validated(server, "projects.locations.jobs.list", None)
            return "projects.locations.jobs.list", 200, {"jobs": server.list_jobs(m["p"], m["l"])}
        if (m := _JOB.match(path)) and verb == "GET":
            self._validated(server, "projects.locations.jobs.get", None)
            return "projects.locations.jobs.get", 200, server.job_json(server.job(path[4:]))
        if (m := _JOB.match(path)) and verb == "DELETE":
            self._validated(server, "projects.locations.jobs.delete", None)
            return "projects.locations.jobs.delete", 200, server.delete(path[4:], m["j"])
        if (m := _TASKS.match(path)) and verb == "GET":
            self._validated(server, "projects.locations.jobs.taskGroups.tasks.list", None)
            job = server.job(path[4:].rsplit("/taskGroups/", 1)[0])
            return (
                "projects.locations.jobs.taskGroups.tasks.list",
                200,
                {"tasks": [server.task_json(job)]},
            )
        raise BatchApiError(404, "NOT_FOUND", f"no route {verb} {path}")


class FakeBatchServer(LoopbackStandIn):
    handler_class = _BatchHandler

    def __init__(
        self,
        project: str = "bench-test-project",
        regions: tuple[str, ...] = ("us-central1", "europe-west4"),
    ) -> None:
        super().__init__()
        self.project = project
        self.regions = list(regions)
        self.lock = threading.RLock()
        self.jobs: dict[str, FakeJob] = {}  # by name, "projects/p/locations/l/jobs/j"
        self.created: list[dict[str, Any]] = []  # every jobs.create body, as sent
        self.requests: list[tuple[str, str]] = []
        self.run_scripts = True
        self.script_override: str | None = None  # run this instead (e.g. "sleep 300")
        self.api_disabled = False  # every call answers 403 SERVICE_DISABLED
        self.time_scale = 1.0  # simulated seconds per real second, for maxRunDuration
        self.preemption_grace_s = 30.0
        self.vm_env: dict[str, str] = {}
        self.vm_path: list[str] = []
        self._stocked_out: set[str] = set()
        self._failing_deletes: set[str] = set()
        self._runners: dict[str, TaskRunner] = {}
        self._request_ids: dict[str, str] = {}
        self.sandbox_root = tempfile.mkdtemp(prefix="fake-batch-")
        self.metadata = MetadataServer(self)
        # The project IAM every call is authorized against (iam_policy.py).
        self.iam = ProjectIam()
        self.denied: list[tuple[str, str, str]] = []  # (member, permission, resource)
        self.bucket_proxy: Any = None  # the `batch` fixture's GcsIamProxy

    def start(self) -> FakeBatchServer:
        self.metadata.start()
        return super().start()

    def stop(self) -> None:
        for runner in list(self._runners.values()):
            runner.cancel()
        self.metadata.stop()
        super().stop()
        # The tasks' work folders: a suite run used to leave one per server in /tmp.
        shutil.rmtree(self.sandbox_root, ignore_errors=True)

    @property
    def metadata_url(self) -> str:
        return self.metadata.url

    # -- IAM -----------------------------------------------------------------------------

    def authorize(self, method: str, resource: str, body: Any, token: str) -> None:
        """The caller needs the method's permission on the project's policy (a job's own
        for a job, the project for a list), and a create actAs on the job's account."""
        project = resource.split("/")[1]
        job = re.match(r"^projects/[^/]+/locations/[^/]+/jobs/[^/]+", resource)
        on = Resource("batch.googleapis.com/Job", job[0]) if job else None
        on = on or Resource("cloudresourcemanager.googleapis.com/Project", f"projects/{project}")
        member = self.iam.caller
        if token.startswith(VM_TOKEN_PREFIX):
            identity = self.identity_of_token(token)
            if identity is None:
                raise BatchApiError(401, "UNAUTHENTICATED", "Request had invalid credentials.")
            member = f"serviceAccount:{identity.email}"  # its scopes hold cloud-platform
        needs = [(PERMISSIONS[method], on)]
        if method == "projects.locations.jobs.create":
            email = vm_account(project, body or {})["email"]
            account = Resource(
                "iam.googleapis.com/ServiceAccount", f"projects/{project}/serviceAccounts/{email}"
            )
            needs.append(("iam.serviceAccounts.actAs", account))
        roles = predefined_or(self.iam.roles)
        for permission, on in needs:
            if not allows(self.iam.bindings_on(project, on), roles, member, permission, on):
                self.denied.append((member, permission, on.name))
                raise _refused(permission, on.name)

    def identity_of_token(self, token: str) -> TokenIdentity | None:
        """Who a job VM's token is: the job's account with its scopes; None for no live VM."""
        name = token.removeprefix(VM_TOKEN_PREFIX)
        vm = next((vm for vm in self._vms() if vm.name == name), None)
        if vm is None:
            return None
        account = vm.sent["serviceAccounts"][0]
        return TokenIdentity(account["email"], frozenset(account["scopes"]))

    # -- faults --------------------------------------------------------------------------

    def stockout(self, region: str) -> None:
        self._stocked_out.add(region)

    def restock(self, region: str) -> None:
        self._stocked_out.discard(region)

    def stocked_out(self, job: FakeJob) -> bool:
        return job.region in self._stocked_out

    def preempt(self, job_id: str, after_s: float) -> None:
        """The next (or current) attempt's VM of this job is preempted `after_s` in."""
        self.job_by_id(job_id).preempt_after_s = after_s

    def fail_delete(self, job_id: str) -> None:
        self._failing_deletes.add(job_id)

    # -- state ---------------------------------------------------------------------------

    def job_by_id(self, job_id: str) -> FakeJob:
        with self.lock:
            return next(j for j in self.jobs.values() if j.name.endswith(f"/jobs/{job_id}"))

    def job(self, name: str) -> FakeJob:
        with self.lock:
            job = self.jobs.get(name)
        if job is None:
            raise BatchApiError(404, "NOT_FOUND", f"Job {name} not found")
        return job

    def locations(self, project: str) -> dict[str, Any]:
        return {
            "locations": [
                {"name": f"projects/{project}/locations/{r}", "locationId": r} for r in self.regions
            ]
        }

    def create(
        self, project: str, region: str, query: dict[str, str], body: dict[str, Any]
    ) -> dict:
        job_id = query.get("jobId", "")
        if not _JOB_ID.fullmatch(job_id):
            raise _bad(f"job id {job_id!r} does not match {_JOB_ID.pattern}")
        if region not in self.regions:
            raise BatchApiError(404, "NOT_FOUND", f"location {region} not found")
        check_create(body, region)
        name = f"projects/{project}/locations/{region}/jobs/{job_id}"
        with self.lock:
            # requestId: a resent create answers with the job it created (jobs.create).
            request_id = query.get("requestId")
            if request_id and self._request_ids.get(request_id) == name:
                return self.job_json(self.jobs[name])
            if name in self.jobs:
                raise BatchApiError(409, "ALREADY_EXISTS", f"Job {name} already exists")
            self.created.append(body)
            stored = {
                **body,
                "name": name,
                "uid": f"{job_id[:50]}-{uuid.uuid4().hex[:8]}",
                "createTime": now_rfc3339(),
                "updateTime": now_rfc3339(),
            }
            job = FakeJob(stored, region)
            job.event("STATUS_CHANGED", "Job state is set from QUEUED to QUEUED")
            self.jobs[name] = job
            if request_id:
                self._request_ids[request_id] = name
            runner = TaskRunner(self, job)
            self._runners[name] = runner
        runner.start()
        return self.job_json(job)

    def list_jobs(self, project: str, region: str) -> list[dict[str, Any]]:
        prefix = f"projects/{project}/locations/{region}/jobs/"
        with self.lock:
            return [self.job_json(j) for n, j in self.jobs.items() if n.startswith(prefix)]

    def delete(self, name: str, job_id: str) -> dict[str, Any]:
        job = self.job(name)
        if job_id in self._failing_deletes:
            raise BatchApiError(500, "INTERNAL", f"Internal error deleting {name}")
        with self.lock:
            job.deleted = True
            job.state = "DELETION_IN_PROGRESS"
            self.jobs.pop(name, None)
            runner = self._runners.pop(name, None)
        if runner is not None:
            runner.cancel()
        # A delete is a long-running operation; here it is done when answered.
        return {
            "name": f"projects/{self.project}/locations/{job.region}/operations/{uuid.uuid4().hex}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }

    def job_json(self, job: FakeJob) -> dict[str, Any]:
        with self.lock:
            return {
                **job.body,
                "status": {
                    "state": job.state,
                    "statusEvents": list(job.events),
                    "taskGroups": {"group0": {"counts": {job.task_state: "1"}}},
                },
                "updateTime": now_rfc3339(),
            }

    def task_json(self, job: FakeJob) -> dict[str, Any]:
        with self.lock:
            return {
                "name": f"{job.name}/taskGroups/group0/tasks/0",
                "status": {"state": job.task_state, "statusEvents": list(job.task_events)},
            }

    def wait_for_state(
        self, job_id: str, states: tuple[str, ...], timeout: float = HANG_SECONDS
    ) -> str:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_by_id(job_id).state
            if state in states:
                return state
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} still {self.job_by_id(job_id).state}")

    # -- MetadataSource --------------------------------------------------------------------

    def _vms(self):
        with self.lock:
            return [j.vm for j in self.jobs.values() if j.vm is not None and j.vm.sandbox]

    def metadata_instance(self, project: str, zone: str, name: str):
        return next((vm for vm in self._vms() if vm.name == name), None)

    def metadata_instance_for_peer(self, client_port: int, server_port: int):
        session = session_of_peer(client_port, server_port)
        for vm in self._vms():
            if session is not None and session in vm.sandbox.session_ids():
                return vm
        return None

    def project_number(self, project: str) -> int:
        from .compute_state import project_number

        return project_number(project)
