"""Loopback stand-in for the Compute Engine v1 REST API subset bench uses.

Speaks the paths and JSON of the real API, so the real google-cloud-compute client
(transport="rest", api_endpoint=server.endpoint, AnonymousCredentials) drives it:

  POST   /compute/v1/projects/{p}/zones/{z}/instances                  insert
  GET    /compute/v1/projects/{p}/zones/{z}/instances                  list
  GET    /compute/v1/projects/{p}/zones/{z}/instances/{n}              get
  DELETE /compute/v1/projects/{p}/zones/{z}/instances/{n}              delete
  POST   /compute/v1/projects/{p}/zones/{z}/instances/{n}/stop|start   stop, start
  GET    /compute/v1/projects/{p}/zones/{z}/instances/{n}/serialPort   getSerialPortOutput
  GET    /compute/v1/projects/{p}/aggregated/instances                 aggregatedList
  GET    /compute/v1/projects/{p}/zones/{z}/operations/{op}            zoneOperations.get
  POST   /compute/v1/projects/{p}/zones/{z}/operations/{op}/wait       zoneOperations.wait
  GET    /compute/v1/projects/{p}                                      projects.get
  GET    /compute/v1/projects/{p}/regions/{r}                          regions.get
  GET    /compute/v1/projects/{p}/zones/{z}                            zones.get
  GET    /compute/v1/projects/{p}/zones/{z}/machineTypes/{t}           machineTypes.get
  GET    /compute/v1/projects/{p}/zones/{z}/acceleratorTypes/{t}       acceleratorTypes.get
  GET    /compute/v1/projects/{p}/global/images/family/{f}             images.getFromFamily
  GET    /compute/v1/projects/{p}/global/images                        images.list
  POST   /_fake/poweroff/{p}/{z}/{n}      the fake VM's `shutdown` shim (body: its arguments)

Every request (query and body) and every 200 answer is checked against the compute v1
discovery document (discovery.py): a request that does not fit answers 400 as the API
would, an answer that does not fit is a stand-in bug (500); both land in
`server.schema_violations`, and `stop()` fails the test when any did.

Callers: a request without Authorization is the controller (AnonymousCredentials), the
principal `iam_policy.CONTROLLER_MEMBER`, a new project's owner unless a test changes the
project's policy; one with `Bearer fake-token-<instance>` (the metadata server's token) comes
from that VM and is authorized against its service account and scopes. Both are authorized
against the project's IAM policy, conditions evaluated (see `authorize`). Inserts are checked
as the API checks them (insert_rules.py) and count against the project's GPU quota, which is
a new project's 0 until a test raises it (`server.catalog.raise_gpu_quotas()`).

Instances run their startup-script in a sandbox (vm_sandbox.py) once RUNNING, with the
environment of the test process plus `config.vm_env`, PATH = shims + `config.vm_path` + PATH,
BENCH_METADATA_ENDPOINT = the instance's routed metadata base URL (metadata_server.py), and
BENCH_FAKE_DNS = the internal DNS resolver every VM of the network shares (internal_dns.py).
Faults are set through `server.faults` (faults.py); every request is recorded in
`server.requests`, every insert body, exactly as sent, in `server.inserted`.

Typical use:

    with FakeComputeServer(time_scale=600) as server:
        client = compute_v1.InstancesClient(**compute_client_options(server))
        server.faults.stockout("us-central1-a")
        ...
        server.preempt("us-central1-b", "bench-x", after_s=120)
        server.wait_for_status("us-central1-b", "bench-x", "DELETED")
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.limits import HANG_SECONDS

from . import discovery
from .compute_catalog import FakeCatalog
from .compute_state import (
    BilledSeconds,
    FakeCompute,
    FakeComputeConfig,
    FakeInstance,
    project_number,
)
from .faults import DROP, FaultPlan
from .gce_errors import GceError, invalid
from .http_base import BackgroundHttpServer, JsonHandler
from .iam_policy import CONTROLLER_MEMBER, Resource, allows, new_project_policy, predefined_or
from .internal_dns import InternalDns, Record
from .list_filter import compile_filter
from .metadata_server import VM_TOKEN_PREFIX, MetadataServer, TokenIdentity
from .operations import API_ROOT
from .peer_process import session_of_peer

COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

if TYPE_CHECKING:
    from typing_extensions import Self

_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"
_I = _Z + r"/instances/(?P<name>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(f"^{pattern}$"), api_name)
    for method, pattern, api_name in [
        ("POST", _Z + "/instances", "instances.insert"),
        ("GET", _Z + "/instances", "instances.list"),
        ("GET", _I, "instances.get"),
        ("DELETE", _I, "instances.delete"),
        ("POST", _I + "/stop", "instances.stop"),
        ("POST", _I + "/start", "instances.start"),
        ("GET", _I + "/serialPort", "instances.getSerialPortOutput"),
        ("GET", _P + "/aggregated/instances", "instances.aggregatedList"),
        ("GET", _Z + r"/operations/(?P<op>[^/]+)", "zoneOperations.get"),
        ("POST", _Z + r"/operations/(?P<op>[^/]+)/wait", "zoneOperations.wait"),
        ("GET", _P, "projects.get"),
        ("GET", _P + r"/regions/(?P<region>[^/]+)", "regions.get"),
        ("GET", _Z, "zones.get"),
        ("GET", _Z + r"/machineTypes/(?P<type>[^/]+)", "machineTypes.get"),
        ("GET", _Z + r"/acceleratorTypes/(?P<type>[^/]+)", "acceleratorTypes.get"),
        ("GET", _P + r"/global/images/family/(?P<family>[^/]+)", "images.getFromFamily"),
        ("GET", _P + r"/global/images", "images.list"),
    ]
]
_POWEROFF = re.compile(r"^/_fake/poweroff/(?P<project>[^/]+)/(?P<zone>[^/]+)/(?P<name>[^/]+)$")


@dataclass
class RecordedRequest:
    api_method: str  # e.g. instances.insert
    http_method: str
    path: str
    query: dict[str, str]
    body: Any  # parsed JSON, or None
    caller: str = "controller"  # or "vm:<instance name>" for a VM's own token


class _ComputeHandler(JsonHandler):
    def handle_request(self) -> None:
        server: FakeComputeServer = self.server.owner  # type: ignore[attr-defined]
        poweroff = _POWEROFF.match(self.url_path)
        if poweroff and self.command == "POST":
            args = self.raw_body.decode().split()
            try:
                server.compute.guest_shutdown(*poweroff.groups(), args)
                self.reply_text(200, "ok\n")
            except GceError as error:
                self.reply_json(error.status, error.http_payload())
            return
        for http_method, pattern, api_name in _ROUTES:
            match = pattern.match(self.url_path)
            if match and self.command == http_method:
                self._serve(server, api_name, match.groupdict())
                return
        self.reply_json(404, {"error": {"code": 404, "message": f"fake: no route {self.path}"}})

    def _serve(self, server: FakeComputeServer, api_name: str, params: dict[str, str]) -> None:
        body = self.json_body()
        caller = _caller(self.headers.get("Authorization"))
        request = RecordedRequest(api_name, self.command, self.url_path, self.query, body, caller)
        server.record(request)
        delay = server.faults.delay_for(api_name)
        if delay:
            time.sleep(delay)
        try:
            transient = server.faults.take_transient(api_name)
            if transient is DROP:
                self.close_connection = True  # no status line: the client sees a reset
                return
            if transient is not None:
                raise transient
            server.check_request(request)
            server.authorize(request, params)
            answer = server.handle(api_name, params, self.query, body)
            server.check_response(api_name, answer)
            if server.faults.take_lost_answer(api_name):
                self.close_connection = True  # done, but the answer never reaches the client
                return
            self.reply_json(200, answer)
        except GceError as error:
            self.reply_json(error.status, error.http_payload())


def _caller(authorization: str | None) -> str:
    token = (authorization or "").removeprefix("Bearer ").strip()
    if token.startswith(VM_TOKEN_PREFIX):
        return f"vm:{token[len(VM_TOKEN_PREFIX) :]}"
    return "controller"


def _page(items: list[Any], query: dict[str, str]) -> tuple[list[Any], str | None]:
    start = int(query.get("pageToken") or 0)
    size = int(query.get("maxResults") or 500)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


class ProjectIam:
    """Project IAM policies and custom roles when no IAM stand-in is wired in. Any service
    account named exists here (the IAM stand-in, iam_server.py, knows which do)."""

    caller = CONTROLLER_MEMBER  # who a request without a token comes from

    def __init__(self) -> None:
        self.policies: dict[str, dict[str, Any]] = {}
        self.roles: dict[str, dict[str, Any]] = {}

    def policy(self, project: str) -> dict[str, Any]:
        return self.policies.setdefault(project, new_project_policy())

    def bindings_on(self, project: str, resource: Resource) -> list[dict[str, Any]]:
        """The bindings that hold on `resource`: the project's (no account has a policy of
        its own here; the IAM stand-in's `bindings_on` adds it)."""
        return list(self.policy(project).get("bindings", []))

    def account_exists(self, email: str) -> bool:
        return True

    def grant(self, project: str, member: str, role: str, condition: dict | None = None) -> None:
        binding: dict[str, Any] = {"role": role, "members": [member]}
        if condition:
            binding["condition"] = condition
        self.policy(project)["bindings"].append(binding)

    def grant_self_delete(self, project: str, account: str) -> None:
        """What `bench setup` grants: a custom role with compute.instances.delete under its
        condition (orchestrator/backends/gce/iam.py), evaluated here like any other."""
        from orchestrator.backends.gce.iam import (
            SELF_DELETE_PERMISSIONS,
            SELF_DELETE_ROLE_ID,
            self_delete_condition,
        )

        role = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
        self.roles[role] = {"includedPermissions": list(SELF_DELETE_PERMISSIONS)}
        condition = {"title": "bench instances only", "expression": self_delete_condition(project)}
        self.grant(project, f"serviceAccount:{account}", role, condition)


# Methods whose permission is not compute.<method> (each method's page under
# https://cloud.google.com/compute/docs/reference/rest/v1 lists its IAM permission).
_PERMISSIONS = {
    "instances.insert": "compute.instances.create",
    "instances.aggregatedList": "compute.instances.list",
    "zoneOperations.wait": "compute.zoneOperations.get",
    "images.getFromFamily": "compute.images.getFromFamily",
}
# Public images "are available to all users" (https://cloud.google.com/compute/docs/images):
# reading them needs no role in their project.
PUBLIC_IMAGE_PROJECTS = ("deeplearning-platform-release", "debian-cloud")


def _needed(api_method: str, params: dict[str, str], body: Any) -> tuple[str, Resource]:
    """The permission a Compute method needs and the resource a condition sees."""
    permission = _PERMISSIONS.get(api_method, f"compute.{api_method}")
    project, zone, name = params.get("project"), params.get("zone"), params.get("name")
    if api_method == "instances.insert":
        name = (body or {}).get("name")
    if name and zone:
        return permission, _instance(str(project), zone, name)
    return permission, Resource("compute.googleapis.com/Project", f"projects/{project}")


def _instance(project: str, zone: str, name: str) -> Resource:
    return Resource(
        "compute.googleapis.com/Instance", f"projects/{project}/zones/{zone}/instances/{name}"
    )


def _auto_deleted_disks(inst: FakeInstance) -> list[Resource]:
    """The disks deleting this instance deletes: those with autoDelete. A disk created with
    the instance is named after it unless the request names it
    (AttachedDiskInitializeParams.diskName in the compute v1 discovery document)."""
    return [
        Resource(
            "compute.googleapis.com/Disk",
            f"projects/{inst.project}/zones/{inst.zone}/disks/"
            + ((disk.get("initializeParams") or {}).get("diskName") or inst.name),
        )
        for disk in inst.sent.get("disks") or []
        if disk.get("autoDelete")
    ]


def _refused(permission: str, resource: Resource) -> GceError:
    return GceError(
        403,
        "forbidden",
        "PERMISSION_DENIED",
        f"Required '{permission}' permission for '{resource.name}'",
    )


class FakeComputeServer:
    """The compute and metadata stand-ins; use as a context manager or start()/stop().

    `config` or keyword overrides of FakeComputeConfig set timings, `time_scale`, the
    known zones and the VM environment.
    """

    def __init__(self, config: FakeComputeConfig | None = None, **overrides: Any) -> None:
        self.config = config or FakeComputeConfig(**overrides)
        self.faults = FaultPlan()
        self.requests: list[RecordedRequest] = []
        self.inserted: list[dict[str, Any]] = []
        self.schema_violations: list[str] = []
        self.catalog = FakeCatalog(self.config.zones)
        # The project IAM every call is authorized against (the controller's and a VM's):
        # `.policy(project)`, `.roles` (custom roles by name) and `.account_exists(email)`,
        # e.g. the IAM stand-in (tests/fakes/iam_server.py).
        self.iam: ProjectIam = ProjectIam()
        self._record_lock = threading.Lock()
        self._http = BackgroundHttpServer(_ComputeHandler)
        self.metadata = MetadataServer(self)
        self.dns = InternalDns(self.dns_records)
        self.compute: FakeCompute | None = None  # type: ignore[assignment]

    # -- lifecycle of the stand-in -------------------------------------------------------

    def start(self) -> Self:
        self.metadata.start()
        self.dns.start()
        self._http.start(self)
        self.compute = FakeCompute(
            self.config,
            self.faults,
            metadata_endpoint_for=lambda i: self.metadata.url_for(i.project, i.zone, i.name),
            dns_address=self.dns.address,
            poweroff_url_for=lambda i: (
                f"{self._http.base_url}/_fake/poweroff/{i.project}/{i.zone}/{i.name}"
            ),
            catalog=self.catalog,
        )
        return self

    def stop(self) -> None:
        # The clock first: a VM it boots after the HTTP front stopped has no power-off URL.
        if self.compute is not None:
            self.compute.shutdown()
        self._http.stop()
        self.metadata.stop()
        self.dns.stop()
        if self.schema_violations:
            raise AssertionError(
                "compute stand-in: requests or answers outside the discovery schema:\n"
                + "\n".join(self.schema_violations)
            )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dns_records(self) -> list[Record]:
        """What internal DNS publishes now: every instance that exists, whatever its state."""
        if self.compute is None:
            return []
        with self.compute.lock:
            return [
                (i.project, i.zone, i.name, i.network_ip) for i in self.compute.instances.values()
            ]

    @property
    def endpoint(self) -> str:
        """For ClientOptions(api_endpoint=...)."""
        return self._http.base_url

    @property
    def metadata_url(self) -> str:
        """Shared metadata base URL (…/computeMetadata/v1); tells VMs apart by process."""
        return self.metadata.url

    def metadata_url_for(self, zone: str, name: str, project: str | None = None) -> str:
        """Routed metadata base URL of one instance (what its BENCH_METADATA_ENDPOINT holds)."""
        project = project or self.instance(zone, name).project
        return self.metadata.url_for(project, zone, name)

    # -- test-facing helpers -------------------------------------------------------------

    def record(self, request: RecordedRequest) -> None:
        with self._record_lock:
            self.requests.append(request)
            if request.api_method == "instances.insert":
                self.inserted.append(request.body)

    def calls(self, api_method: str) -> list[RecordedRequest]:
        with self._record_lock:
            return [r for r in self.requests if r.api_method == api_method]

    def instances(self) -> list[FakeInstance]:
        """Instances that exist now (not deleted)."""
        with self.compute.lock:
            return list(self.compute.instances.values())

    def instance(self, zone: str, name: str, project: str | None = None) -> FakeInstance:
        """A live instance, else the most recently deleted one of that name."""
        with self.compute.lock:
            candidates = [*self.compute.gone, *self.compute.instances.values()]
        matches = [
            i
            for i in candidates
            if i.zone == zone and i.name == name and project in (None, i.project)
        ]
        if not matches:
            raise KeyError(f"no instance {zone}/{name}")
        live = [i for i in matches if not i.deleted]
        return (live or matches)[-1]

    def preempt(
        self, zone: str, name: str, after_s: float | None = None, project: str | None = None
    ) -> None:
        """Preempts now, or `after_s` simulated seconds after the instance reached RUNNING."""
        inst = self.instance(zone, name, project)
        self.compute.preempt(zone, name, after_s, inst.project)

    def wait_for(
        self, predicate: Any, timeout: float = HANG_SECONDS, interval: float = 0.02
    ) -> None:
        """Polls `predicate()` until true; raises TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)

    def wait_for_status(
        self, zone: str, name: str, status: str, timeout: float = HANG_SECONDS
    ) -> FakeInstance:
        """Waits until the instance has `status` ("DELETED" waits for its removal)."""

        def reached() -> bool:
            try:
                inst = self.instance(zone, name)
            except KeyError:
                return False
            return inst.deleted if status == "DELETED" else inst.status == status

        self.wait_for(reached, timeout)
        return self.instance(zone, name)

    def serial_output(self, zone: str, name: str) -> str:
        return self.instance(zone, name).serial_text()

    def billed_seconds(self, inst: FakeInstance) -> BilledSeconds:
        """What the instance has billed, in simulated seconds (compute_state.py says how)."""
        return self.compute.billed_seconds(inst)

    # -- MetadataSource ------------------------------------------------------------------

    def metadata_instance(self, project: str, zone: str, name: str) -> FakeInstance | None:
        try:
            return self.instance(zone, name, project)
        except KeyError:
            return None

    def metadata_instance_for_peer(self, client_port: int, server_port: int) -> FakeInstance | None:
        session = session_of_peer(client_port, server_port)
        with self.compute.lock:
            booted = [
                i
                for i in [*self.compute.instances.values(), *self.compute.gone]
                if i.sandbox is not None
            ]
        for inst in booted:
            if session is not None and session in inst.sandbox.session_ids():
                return inst
        live = [i for i in booted if not i.deleted]
        # Callers outside any VM (a test's own curl) get the only VM when there is one.
        return live[0] if len(live) == 1 else None

    def project_number(self, project: str) -> int:
        return project_number(project)

    # -- schema and authorization ----------------------------------------------------------

    def check_request(self, request: RecordedRequest) -> None:
        try:
            discovery.validate_call(
                "compute", "v1", request.api_method, request.query, request.body
            )
        except discovery.DiscoveryError as e:
            self.schema_violations.append(f"request {request.api_method}: {e}")
            raise invalid(f"Invalid JSON payload received. {e}") from None

    def check_response(self, api_name: str, answer: Any) -> None:
        try:
            discovery.validate_response("compute", "v1", api_name, answer)
        except discovery.DiscoveryError as e:
            self.schema_violations.append(f"answer {api_name}: {e}")
            raise GceError(
                500, "backendError", "INTERNAL", f"stand-in answer invalid: {e}"
            ) from None

    def authorize(self, request: RecordedRequest, params: dict[str, str]) -> None:
        """Every call needs its method's IAM permission on its resource, the project's
        policy deciding, conditions evaluated on the full resource name (tests/fakes/
        iam_policy.py; https://cloud.google.com/compute/docs/access/
        granting-access-to-resources#iam-conditions). The controller is CONTROLLER_MEMBER.
        A VM calls with its service account's token from the metadata server; the call also
        needs an access scope that covers Compute
        (https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam).
        Besides: an insert needs iam.serviceAccounts.actAs on the VM's service account
        (https://cloud.google.com/iam/docs/service-accounts-actas); deleting an instance
        deletes its auto-delete disks, and a VM's own delete is held to
        compute.disks.delete on them too: the stricter reading where
        https://cloud.google.com/compute/docs/instances/deleting-instance does not settle it
        (bench grants it; backends/gce/iam.py).
        """
        if not self.catalog.credentials_valid:
            # https://cloud.google.com/docs/authentication/troubleshoot-adc (401 UNAUTHENTICATED)
            raise GceError(
                401,
                "authError",
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential.",
            )
        if not self.catalog.compute_api_enabled:
            raise GceError(
                403,
                "accessNotConfigured",
                "SERVICE_DISABLED",
                f"Compute Engine API has not been used in project {params.get('project')} "
                "before or it is disabled.",
                domain="usageLimits",
            )
        project = params.get("project", "")
        permission, resource = _needed(request.api_method, params, request.body)
        if permission.startswith("compute.images.") and project in PUBLIC_IMAGE_PROJECTS:
            return
        member = CONTROLLER_MEMBER
        if request.caller != "controller":
            caller = self.metadata_instance_by_name(request.caller[len("vm:") :])
            account = (caller.sent.get("serviceAccounts") or [{}])[0] if caller else {}
            if not set(account.get("scopes") or []) & {COMPUTE_SCOPE, CLOUD_PLATFORM_SCOPE}:
                raise _refused(permission, resource)
            member = f"serviceAccount:{self.account_email(caller) if caller else None}"
        needs = [(permission, resource)]
        if request.api_method == "instances.insert":
            needs.append(self._act_as(project, request.body or {}))
        if request.api_method == "instances.delete" and request.caller != "controller":
            with self.compute.lock:
                target = self.compute.instances.get((project, params["zone"], params["name"]))
            for disk in _auto_deleted_disks(target) if target else []:
                needs.append(("compute.disks.delete", disk))
        bindings = self.iam.policy(project).get("bindings", [])
        roles = predefined_or(self.iam.roles)
        for needed, on in needs:
            if needed == "iam.serviceAccounts.actAs" and not (
                self.iam.account_exists(on.name.rsplit("/", 1)[-1])
                and allows(bindings, roles, member, needed, on)
            ):
                raise self._no_act_as(on, member)
            if not allows(bindings, roles, member, needed, on):
                raise _refused(needed, on)

    def _act_as(self, project: str, body: dict[str, Any]) -> tuple[str, Resource]:
        email = ((body.get("serviceAccounts") or [{}])[0]).get("email") or "default"
        if email == "default":
            email = f"{project_number(project)}-compute@developer.gserviceaccount.com"
        resource = Resource(
            "iam.googleapis.com/ServiceAccount", f"projects/{project}/serviceAccounts/{email}"
        )
        return "iam.serviceAccounts.actAs", resource

    def _no_act_as(self, account: Resource, member: str) -> GceError:
        email = account.name.rsplit("/", 1)[-1]
        return invalid(
            f"The user does not have access to service account '{email}'.  User: "
            f"'{member.split(':', 1)[-1]}'.  Ask a project owner to grant you the "
            "iam.serviceAccountUser role on the service account"
        )

    def account_email(self, inst: FakeInstance) -> str:
        """The service account email a VM runs as ("default": the project's default one)."""
        email = ((inst.sent.get("serviceAccounts") or [{}])[0]).get("email") or "default"
        if email == "default":
            return f"{project_number(inst.project)}-compute@developer.gserviceaccount.com"
        return email

    def identity_of_token(self, token: str) -> TokenIdentity | None:
        """The service account and access scopes a VM token stands for (what the metadata
        server reports for that VM), or None for a token of no live VM."""
        inst = self.metadata_instance_by_name(token.removeprefix(VM_TOKEN_PREFIX))
        if inst is None:
            return None
        account = (inst.sent.get("serviceAccounts") or [{}])[0]
        return TokenIdentity(self.account_email(inst), frozenset(account.get("scopes") or []))

    def metadata_instance_by_name(self, name: str) -> FakeInstance | None:
        with self.compute.lock:
            live = [i for i in self.compute.instances.values() if i.name == name]
        return live[0] if live else None

    # -- API handlers --------------------------------------------------------------------

    def handle(
        self, api_name: str, p: dict[str, str], query: dict[str, str], body: Any
    ) -> dict[str, Any]:
        compute = self.compute
        catalog_answer = self._catalog(api_name, p, query)
        if catalog_answer is not None:
            return catalog_answer
        if api_name == "instances.insert":
            request_id = query.get("requestId")
            return compute.insert(p["project"], p["zone"], body or {}, request_id).to_json()
        if api_name == "instances.get":
            with compute.lock:
                return compute.get(p["project"], p["zone"], p["name"]).to_json()
        if api_name == "instances.delete":
            return compute.delete(p["project"], p["zone"], p["name"]).to_json()
        if api_name == "instances.stop":
            return compute.stop(p["project"], p["zone"], p["name"]).to_json()
        if api_name == "instances.start":
            return compute.start(p["project"], p["zone"], p["name"]).to_json()
        if api_name == "instances.getSerialPortOutput":
            return self._serial_port(p, query)
        if api_name == "instances.list":
            return self._list(p, query)
        if api_name == "instances.aggregatedList":
            return self._aggregated_list(p["project"], query)
        op = compute.operation(p["project"], p["zone"], p["op"])
        if api_name == "zoneOperations.wait":
            # "waits for no more than the 2 minutes and then returns the current state of
            # the operation, which might be DONE or still in progress":
            # https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait
            op.done.wait(self.config.wait_hold_s)
        return op.to_json()

    def _catalog(self, api_name: str, p: dict[str, str], query: dict[str, str]) -> Any:
        catalog = self.catalog
        if api_name == "projects.get":
            in_use = self.compute.gpu_usage(p["project"], None)
            return catalog.project(p["project"], project_number(p["project"]), in_use)
        if api_name == "regions.get":
            in_use = self.compute.gpu_usage(p["project"], p["region"])
            return catalog.region(p["project"], p["region"], in_use)
        if api_name == "zones.get":
            return catalog.zone(p["project"], p["zone"])
        if api_name == "machineTypes.get":
            return catalog.machine_type(p["project"], p["zone"], p["type"])
        if api_name == "acceleratorTypes.get":
            return catalog.accelerator_type(p["project"], p["zone"], p["type"])
        if api_name == "images.getFromFamily":
            return catalog.image_from_family(p["project"], p["family"])
        if api_name == "images.list":
            match = re.fullmatch(r'family\s*=\s*"?([a-z0-9-]+)"?', query.get("filter", ""))
            if match is None:
                raise invalid('fake: images.list supports only a `family = "X"` filter')
            items = catalog.images_in_family(p["project"], match[1])
            return {
                "kind": "compute#imageList",
                "id": f"projects/{p['project']}/global/images",
                "items": items,
                "selfLink": f"{API_ROOT}/projects/{p['project']}/global/images",
            }
        return None

    def _serial_port(self, p: dict[str, str], query: dict[str, str]) -> dict[str, Any]:
        with self.compute.lock:
            inst = self.compute.get(p["project"], p["zone"], p["name"])
            status = inst.status
        # "Serial port output is accessible ... only while the VM instance is running"
        # (https://cloud.google.com/compute/docs/troubleshooting/viewing-serial-port-output);
        # a stopping guest still runs its shutdown.
        if status not in ("RUNNING", "STOPPING"):
            raise invalid(f"The resource '{inst.path}' is not ready")
        port = int(query.get("port") or 1)
        if not 1 <= port <= 4:
            raise invalid(f"Invalid value for field 'port': '{port}'.")
        with inst.serial_lock:
            data = bytes(inst.serial) if port == 1 else b""
        start = min(max(int(query.get("start") or 0), 0), len(data))
        return {
            "kind": "compute#serialPortOutput",
            "contents": data[start:].decode("utf-8", "replace"),
            "start": str(start),
            "next": str(len(data)),
            "selfLink": f"{API_ROOT}/{inst.path}/serialPort?port={port}",
        }

    def _matching(
        self, project: str, zone: str | None, query: dict[str, str]
    ) -> list[dict[str, Any]]:
        keep = compile_filter(query.get("filter"))
        with self.compute.lock:
            found = [
                i.to_json()
                for i in self.compute.instances.values()
                if i.project == project and zone in (None, i.zone)
            ]
        found.sort(key=lambda r: (r["zone"], r["name"]))
        return [resource for resource in found if keep(resource)]

    def _list(self, p: dict[str, str], query: dict[str, str]) -> dict[str, Any]:
        items, token = _page(self._matching(p["project"], p["zone"], query), query)
        reply: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{p['project']}/zones/{p['zone']}/instances",
            "items": items,
            "selfLink": f"{API_ROOT}/projects/{p['project']}/zones/{p['zone']}/instances",
        }
        if token:
            reply["nextPageToken"] = token
        return reply

    def _aggregated_list(self, project: str, query: dict[str, str]) -> dict[str, Any]:
        page, token = _page(self._matching(project, None, query), query)
        zones = set(self.config.zones) | {r["zone"].rsplit("/", 1)[-1] for r in page}
        scoped: dict[str, Any] = {}
        for zone in sorted(zones):
            in_zone = [r for r in page if r["zone"].endswith(f"/zones/{zone}")]
            if in_zone:
                scoped[f"zones/{zone}"] = {"instances": in_zone}
            else:  # the real API lists empty scopes with a warning
                scoped[f"zones/{zone}"] = {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope 'zones/{zone}' on this page.",
                        "data": [{"key": "scope", "value": f"zones/{zone}"}],
                    }
                }
        reply: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{project}/aggregated/instances",
            "items": scoped,
            "selfLink": f"{API_ROOT}/projects/{project}/aggregated/instances",
        }
        if token:
            reply["nextPageToken"] = token
        return reply
