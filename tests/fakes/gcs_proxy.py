"""A loopback proxy in front of fake-gcs-server that adds what it lacks: bucket IAM for the
VM's identity.

fake-gcs-server accepts every request and has no IAM. Cloud Storage answers 403 when the
caller's account holds no role granting the object permission
(https://cloud.google.com/storage/docs/access-control/iam-permissions), and a bucket's
policy is read with `GET /storage/v1/b/{bucket}/iam`
(https://cloud.google.com/storage/docs/json_api/v1/buckets/getIamPolicy). This proxy:

- forwards every request to fake-gcs-server unchanged;
- tells a VM's request by its token (`Bearer fake-token-<instance>`, from the metadata
  stand-in) and answers 403 when that instance's service account is not a member of
  `object_members` (the members granted roles/storage.objectUser on the bucket);
- serves the bucket's policy from `object_members`, checked against the storage v1
  discovery document's Policy schema.

Requests without a VM token (the controller, tests) pass: they act as the project owner.

    with GcsIamProxy(gcs_server.endpoint, compute_server.account_of_token) as proxy:
        proxy.object_members.add("serviceAccount:bench-vm@p.iam.gserviceaccount.com")
        ... BENCH_STORAGE_ENDPOINT = proxy.endpoint ...
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from . import discovery
from .http_base import JsonHandler, LoopbackStandIn
from .metadata_server import VM_TOKEN_PREFIX

_IAM = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/iam$")
_BUCKET = re.compile(r"^/(?:upload/)?storage/v1/b/(?P<bucket>[^/]+)")
OBJECT_ROLE = "roles/storage.objectUser"
OBJECT_ROLES = (OBJECT_ROLE, "roles/storage.objectAdmin", "roles/storage.admin")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class _ProxyHandler(JsonHandler):
    def handle_request(self) -> None:
        proxy: GcsIamProxy = self.server.owner  # type: ignore[attr-defined]
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        account = proxy.identity_of(token) if token.startswith(VM_TOKEN_PREFIX) else None
        iam = _IAM.match(self.url_path)
        if iam and self.command == "PUT" and account is None:
            self._set_policy(proxy, iam["bucket"])
            return
        if iam and self.command == "GET":
            self._policy(proxy, iam["bucket"])
            return
        bucket = _BUCKET.match(self.url_path)
        if account is not None and f"serviceAccount:{account}" not in proxy.object_members:
            name = bucket["bucket"] if bucket else "?"
            proxy.denied.append((account, self.command, self.url_path))
            message = (
                f"{account} does not have storage.objects.get access to the Google Cloud "
                f"Storage bucket. Permission denied on resource (or it may not exist): {name}"
            )
            self.reply_json(
                403,
                {
                    "error": {
                        "code": 403,
                        "message": message,
                        "errors": [{"message": message, "domain": "global", "reason": "forbidden"}],
                    }
                },
            )
            return
        self._forward(proxy)

    def _policy(self, proxy: GcsIamProxy, bucket: str) -> None:
        status, _, _ = proxy.upstream_request("GET", f"/storage/v1/b/{bucket}", b"", {})
        if status != 200:
            self.reply_json(
                404, {"error": {"code": 404, "message": "The specified bucket does not exist."}}
            )
            return
        members = sorted(proxy.object_members)
        policy: dict[str, Any] = {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{bucket}",
            "version": 1,
            "etag": "CAE=",
            "bindings": [{"role": OBJECT_ROLE, "members": members}] if members else [],
        }
        discovery.validate_response("storage", "v1", "buckets.getIamPolicy", policy)
        self.reply_json(200, policy)

    def _set_policy(self, proxy: GcsIamProxy, bucket: str) -> None:
        """buckets.setIamPolicy: members of the object roles become `object_members`."""
        policy = self.json_body()
        try:
            discovery.validate("storage", "v1", "Policy", policy)
        except discovery.DiscoveryError as e:
            proxy.schema_violations.append(f"request buckets.setIamPolicy: {e}")
            self.reply_json(400, {"error": {"code": 400, "message": str(e)}})
            return
        proxy.object_members = {
            member
            for binding in policy.get("bindings", [])
            if binding["role"] in OBJECT_ROLES
            for member in binding["members"]
        }
        self._policy(proxy, bucket)

    def _forward(self, proxy: GcsIamProxy) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        status, reply_headers, body = proxy.upstream_request(
            self.command, self.path, self.raw_body, headers
        )
        self.send_response(status)
        for key, value in reply_headers:
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class GcsIamProxy(LoopbackStandIn):
    """The proxy on its own loopback port; `endpoint` replaces fake-gcs-server's."""

    handler_class = _ProxyHandler

    def __init__(self, upstream: str, identity_of: Callable[[str], str | None]) -> None:
        super().__init__()
        self.upstream = urlsplit(upstream)
        self.identity_of = identity_of
        self.object_members: set[str] = set()
        self.denied: list[tuple[str, str, str]] = []  # (account, method, path) refused

    def upstream_request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(
            self.upstream.hostname, self.upstream.port, timeout=60
        )
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()
