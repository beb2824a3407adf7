"""Stand-in for the GCE metadata server (http://metadata.google.internal/computeMetadata/v1).

URL scheme. On a real VM the script uses `${METADATA_ENDPOINT}/instance/...` with
METADATA_ENDPOINT=http://metadata.google.internal/computeMetadata/v1. Here two bases exist:

- routed, one per fake VM:  http://127.0.0.1:PORT/vm/{project}/{zone}/{name}/computeMetadata/v1
  Every VM subprocess gets its own in the env var BENCH_METADATA_ENDPOINT.
- shared, like the real one: http://127.0.0.1:PORT/computeMetadata/v1
  (`FakeComputeServer.metadata_url`, for a script rendered with one endpoint baked in).
  The server tells VMs apart by the calling process's session (see peer_process.py).

Every request needs the header `Metadata-Flavor: Google` (403 without, as on GCE).
`?wait_for_change=true` blocks until the value changes (or `timeout_sec`, at most 60 s).
Served paths: instance/{name,id,hostname,zone,machine-type,preempted},
instance/scheduling/{preemptible,on-host-maintenance,automatic-restart},
instance/attributes/ and instance/attributes/{key}, instance/service-accounts/default/
{email,scopes,token}, project/{project-id,numeric-project-id}
(https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .http_base import BackgroundHttpServer, JsonHandler

_ROUTED = re.compile(
    r"^/vm/(?P<project>[^/]+)/(?P<zone>[^/]+)/(?P<name>[^/]+)"
    r"/computeMetadata/v1/(?P<path>.*)$"
)
# The token names its VM, so the other stand-ins can tell which identity is calling.
VM_TOKEN_PREFIX = "fake-token-"
_SHARED = re.compile(r"^/computeMetadata/v1/(?P<path>.*)$")


@dataclass(frozen=True)
class TokenIdentity:
    """What a VM's token stands for: its service account, and no more than the instance's
    access scopes allow (a VM's call needs a scope that covers it as well as the account's
    IAM permission: https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam)."""

    email: str
    scopes: frozenset[str]


class MetadataInstance(Protocol):
    project: str
    zone: str
    name: str
    id: str
    preempted: bool
    sent: dict[str, Any]

    def metadata_value(self, key: str) -> str | None: ...

    def metadata_keys(self) -> list[str]: ...


class MetadataSource(Protocol):
    """What the metadata server needs from the compute stand-in."""

    def metadata_instance(self, project: str, zone: str, name: str) -> MetadataInstance | None: ...

    def metadata_instance_for_peer(
        self, client_port: int, server_port: int
    ) -> MetadataInstance | None: ...

    def project_number(self, project: str) -> int: ...


def _service_account(inst: MetadataInstance) -> dict[str, Any]:
    accounts = inst.sent.get("serviceAccounts") or [{}]
    return accounts[0]


def metadata_value(
    source: MetadataSource, inst: MetadataInstance, path: str
) -> tuple[str, str] | None:
    """(content type, body) for a metadata path, or None when it does not exist."""
    number = source.project_number(inst.project)
    machine_type = (inst.sent.get("machineType") or "").rsplit("/", 1)[-1]
    account = _service_account(inst)
    email = account.get("email") or f"{number}-compute@developer.gserviceaccount.com"
    scheduling = inst.sent.get("scheduling") or {}
    # A Spot VM reads as preemptible here (its provisioning model is SPOT, its scheduling
    # preemptible); spot VMs default to TERMINATE and no automatic restart.
    spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
    maintenance = scheduling.get("onHostMaintenance") or ("TERMINATE" if spot else "MIGRATE")
    restart = scheduling.get("automaticRestart", not spot)
    text_values = {
        "instance/name": inst.name,
        "instance/id": inst.id,
        "instance/hostname": f"{inst.name}.{inst.zone}.c.{inst.project}.internal",
        "instance/zone": f"projects/{number}/zones/{inst.zone}",
        "instance/machine-type": f"projects/{number}/machineTypes/{machine_type}",
        "instance/preempted": "TRUE" if inst.preempted else "FALSE",
        "instance/scheduling/preemptible": "TRUE" if spot else "FALSE",
        "instance/scheduling/on-host-maintenance": maintenance,
        "instance/scheduling/automatic-restart": "TRUE" if restart else "FALSE",
        "instance/attributes/": "".join(f"{key}\n" for key in inst.metadata_keys()),
        "instance/service-accounts/": f"default/\n{email}/\n",
        "instance/service-accounts/default/email": email,
        "instance/service-accounts/default/scopes": "".join(
            f"{scope}\n" for scope in account.get("scopes") or []
        ),
        "project/project-id": inst.project,
        "project/numeric-project-id": str(number),
    }
    if path in text_values:
        return "application/text", text_values[path]
    if path.startswith("instance/attributes/"):
        value = inst.metadata_value(path[len("instance/attributes/") :])
        return None if value is None else ("application/text", value)
    if path == "instance/service-accounts/default/token":
        token = {
            "access_token": f"{VM_TOKEN_PREFIX}{inst.name}",
            "expires_in": 3599,
            "token_type": "Bearer",
        }
        return "application/json", json.dumps(token)
    return None


class _MetadataHandler(JsonHandler):
    def handle_request(self) -> None:
        server: MetadataServer = self.server.owner  # type: ignore[attr-defined]
        if self.headers.get("Metadata-Flavor") != "Google":
            self.reply(403, b"Missing Metadata-Flavor:Google header.\n", "text/plain")
            return
        inst, path = self._resolve(server)
        if inst is None or path is None:
            self.reply(404, b"fake metadata server: unknown instance or path\n", "text/plain")
            return
        server.requests.append((inst.name, path))
        found = metadata_value(server.source, inst, path)
        if found is not None and self.query.get("wait_for_change") == "true":
            found = self._wait_for_change(server, inst, path, found)
        if found is None:
            self.reply(404, b"Not Found\n", "text/plain")
            return
        content_type, body = found
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def _resolve(self, server: MetadataServer) -> tuple[MetadataInstance | None, str | None]:
        routed = _ROUTED.match(self.url_path)
        if routed:
            inst = server.source.metadata_instance(
                routed["project"], routed["zone"], routed["name"]
            )
            return inst, routed["path"]
        shared = _SHARED.match(self.url_path)
        if shared:
            inst = server.source.metadata_instance_for_peer(self.client_address[1], server.port)
            return inst, shared["path"]
        return None, None

    def _wait_for_change(
        self, server: MetadataServer, inst: MetadataInstance, path: str, first: tuple[str, str]
    ) -> tuple[str, str] | None:
        deadline = time.monotonic() + min(float(self.query.get("timeout_sec", 60)), 60.0)
        current: tuple[str, str] | None = first
        while current == first and time.monotonic() < deadline:
            time.sleep(0.02)
            current = metadata_value(server.source, inst, path)
        return current


class MetadataServer:
    """The metadata stand-in on its own loopback port; `source` supplies the instances."""

    def __init__(self, source: MetadataSource) -> None:
        self.source = source
        self.requests: list[tuple[str, str]] = []  # (instance name, path) as served
        self._http = BackgroundHttpServer(_MetadataHandler)

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        """The shared base URL, the counterpart of metadata.google.internal/computeMetadata/v1."""
        return f"{self._http.base_url}/computeMetadata/v1"

    def url_for(self, project: str, zone: str, name: str) -> str:
        """The routed base URL of one instance."""
        return f"{self._http.base_url}/vm/{project}/{zone}/{name}/computeMetadata/v1"

    def start(self) -> MetadataServer:
        self._http.start(self)
        return self

    def stop(self) -> None:
        self._http.stop()
