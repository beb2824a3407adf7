"""A loopback proxy in front of fake-gcs-server that adds what it lacks: bucket IAM and
access scopes for the VM's identity, evaluated as Cloud Storage documents them.

fake-gcs-server accepts every request and has no IAM. This proxy:

- forwards every request to fake-gcs-server unchanged;
- tells a VM's request by its token (`Bearer fake-token-<instance>`, from the metadata
  stand-in), which stands for the VM's service account limited to the instance's access
  scopes: a call needs a scope that covers it as well as the IAM permission
  (https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam). The token
  must carry a scope the method accepts, as the storage v1 discovery document lists each
  method's scopes (https://cloud.google.com/storage/docs/oauth-scopes: devstorage.read_only
  reads, read_write also writes, full_control and cloud-platform do all); without one the
  answer is 403 "Provided scope(s) are not authorized", whatever IAM grants (Cloud
  Storage's answer as users report it: googleapis/google-cloud-cpp#7334). Then the request
  is authorized against the bucket's IAM policy (`bindings`, conditions included, evaluated
  by tests/fakes/iam_policy.py) before forwarding, answering 403 as Cloud Storage does when
  no binding grants the permission
  (https://cloud.google.com/storage/docs/access-control/iam-permissions);
- serves and stores the bucket's policy (`GET`/`PUT /storage/v1/b/{bucket}/iam`,
  https://cloud.google.com/storage/docs/json_api/v1/buckets/getIamPolicy), checked against
  the storage v1 discovery document's Policy schema;
- keeps each bucket's uniform bucket-level access, which fake-gcs-server drops: as a
  buckets.insert body sets it (`iamConfiguration.uniformBucketLevelAccess.enabled`, absent:
  off), shown in buckets.get. A bucket the proxy did not see created counts as uniform (as
  `bench setup` creates them). "To use IAM Conditions on a bucket, you must enable uniform
  bucket-level access" (https://cloud.google.com/storage/docs/access-control/iam#conditions,
  read 2026-11-29): a setIamPolicy with a condition on a bucket without
  it is answered 400.
- keeps each bucket's lifecycle configuration, which fake-gcs-server drops: a buckets.patch
  body's `lifecycle` (checked against the storage v1 discovery document's Bucket schema) is
  stored and shown in buckets.get. As the JSON API documents a rule
  (https://cloud.google.com/storage/docs/json_api/v1/buckets, Bucket.lifecycle.rule[]: "only
  Delete, SetStorageClass, and AbortIncompleteMultipartUpload are supported"; a rule is "an
  action to take and the condition(s) under which the action will be taken";
  https://cloud.google.com/storage/docs/lifecycle#conditions: age is a number of days, not
  negative), a rule without one of those actions or without a condition, or with a negative
  age, is answered 400.

Which permission a request needs, as documented at
https://cloud.google.com/storage/docs/json_api/v1/objects (each method's "Authorization"
section) and https://cloud.google.com/storage/docs/access-control/iam-json:
objects.list needs storage.objects.list on the bucket (the resource a condition sees is the
bucket, `projects/_/buckets/B`, so an object-name condition never grants it); objects.get
storage.objects.get; objects.insert storage.objects.create, and storage.objects.delete too
when it replaces an existing object (no ifGenerationMatch=0); objects.delete
storage.objects.delete; objects.copy/rewrite get on the source and create on the target;
objects.patch/update storage.objects.update. A VM request of any other shape is refused: the
stand-in grants nothing it does not model.

Signed requests carry no token: they act as the account that signed them, for what the
signature covers, until it expires (https://cloud.google.com/storage/docs/access-control/
signed-urls: "anyone who has the URL can use it ... with the permissions of the signer").
The proxy verifies them with the signer's public key (`public_key_of`, the IAM stand-in's)
and refuses with 403 as Cloud Storage's XML API does, before anything is forwarded:

- a V4 signed URL (`X-Goog-Signature` in the query): its canonical request rebuilt from
  this request (method, path, query but the signature, the signed headers,
  UNSIGNED-PAYLOAD) must be what was signed
  (https://cloud.google.com/storage/docs/authentication/canonical-requests,
  https://cloud.google.com/storage/docs/authentication/signatures#string-to-sign), within
  X-Goog-Date + X-Goog-Expires; then the signer needs the method's permission on the object;
- a V4 POST policy form (`POST /BUCKET`, multipart/form-data): the signature is over the
  base64 policy; the policy must not have expired, and every condition must hold for the
  form's fields (exact matches, `starts-with`, `content-length-range`), and every field of
  the form but `file`, `policy`, `x-goog-signature` and `x-ignore-*` must be named by a
  condition (https://cloud.google.com/storage/docs/xml-api/post-object-forms,
  https://cloud.google.com/storage/docs/authentication/signatures#policy-document); then the
  signer needs storage.objects.create (and .delete to replace) on the key.

Other requests without a VM token (the controller, tests) pass: they act as the project
owner.

    with GcsIamProxy(gcs_server.endpoint, compute_server.identity_of_token) as proxy:
        proxy.grant("serviceAccount:bench-vm@p.iam.gserviceaccount.com")
        ... BENCH_STORAGE_ENDPOINT = proxy.endpoint ...
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from . import discovery
from .http_base import JsonHandler, LoopbackStandIn
from .iam_policy import Resource, allows, predefined_or
from .metadata_server import VM_TOKEN_PREFIX, TokenIdentity
from .signed_requests import signed_request_problem
from .signed_requests import xml_error as _xml_error

_IAM = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/iam$")
_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)$")
_OBJECTS = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$")
_FORM_UPLOAD = re.compile(r"^/(?P<bucket>[^/]+)/?$")
_OBJECT = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>[^/]+)$")
_COPY = re.compile(
    r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>[^/]+)/(?P<verb>copyTo|rewriteTo)"
    r"/b/(?P<target_bucket>[^/]+)/o/(?P<target>[^/]+)$"
)
OBJECT_ROLE = "roles/storage.objectUser"
OBJECT_TYPE = "storage.googleapis.com/Object"
BUCKET_TYPE = "storage.googleapis.com/Bucket"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}

Need = tuple[str, Resource]  # (permission, resource)
NOT_MODELLED: tuple[str, list[Need]] = ("", [])  # a request shape the stand-in grants nothing


def _object(bucket: str, name: str) -> Resource:
    return Resource(OBJECT_TYPE, f"projects/_/buckets/{bucket}/objects/{name}")


def scope_allows(method: str, scopes: Collection[str]) -> bool:
    """Whether a token with these access scopes may call this storage v1 method (e.g.
    "objects.insert"): the discovery document lists the scopes each method accepts."""
    accepted = discovery.method("storage", "v1", method).get("scopes", [])
    return not set(accepted).isdisjoint(scopes)


class _ProxyHandler(JsonHandler):
    def handle_request(self) -> None:
        proxy: GcsIamProxy = self.server.owner  # type: ignore[attr-defined]
        if "X-Goog-Signature" in self.query or _FORM_UPLOAD.match(self.url_path):
            refused = signed_request_problem(proxy, self)
            if refused:
                proxy.denied.append(("signed", self.command, self.url_path))
                self.reply(403, _xml_error(refused), "application/xml")
                return
            self._forward(proxy)
            return
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        identity = proxy.identity_of(token) if token.startswith(VM_TOKEN_PREFIX) else None
        iam = _IAM.match(self.url_path)
        if iam and self.command == "PUT" and identity is None:
            self._set_policy(proxy, iam["bucket"])
            return
        if iam and self.command == "GET" and identity is None:
            self._policy(proxy, iam["bucket"])
            return
        if identity is None and self.command == "POST" and self.url_path == "/storage/v1/b":
            body = self.json_body()
            uniform = body.get("iamConfiguration", {}).get("uniformBucketLevelAccess", {})
            proxy.uniform_access[body.get("name", "")] = bool(uniform.get("enabled"))
        bucket = _BUCKET.match(self.url_path)
        if bucket and self.command == "GET" and identity is None:
            self._bucket_resource(proxy, bucket["bucket"])
            return
        if bucket and self.command == "PATCH" and identity is None:
            self._patch_bucket(proxy, bucket["bucket"])
            return
        if identity is not None:
            account, member = identity.email, f"serviceAccount:{identity.email}"
            method, needs = self._call(proxy)
            if needs and not scope_allows(method, identity.scopes):
                self._deny_scope(proxy, account)
                return
            refused = next((n for n in needs if not proxy.allowed(member, *n)), None)
            if not needs or refused:
                self._deny(proxy, account, refused)
                return
        self._forward(proxy)

    def _call(self, proxy: GcsIamProxy) -> tuple[str, list[Need]]:
        """The storage v1 method this request is and the permissions it needs;
        NOT_MODELLED for a shape the stand-in does not model."""
        path, verb = self.url_path, self.command
        if (m := _COPY.match(path)) and verb == "POST":
            method = "objects.copy" if m["verb"] == "copyTo" else "objects.rewrite"
            return method, [
                ("storage.objects.get", _object(m["bucket"], unquote(m["name"]))),
                *self._create_needs(m["target_bucket"], unquote(m["target"])),
            ]
        if (m := _OBJECT.match(path)) is not None:
            name = unquote(m["name"])
            method, permission = {
                "GET": ("objects.get", "storage.objects.get"),
                "DELETE": ("objects.delete", "storage.objects.delete"),
                "PATCH": ("objects.patch", "storage.objects.update"),
                "PUT": ("objects.update", "storage.objects.update"),
            }.get(verb, ("", ""))
            return (method, [(permission, _object(m["bucket"], name))]) if method else NOT_MODELLED
        if (m := _OBJECTS.match(path)) and verb == "GET":
            bucket = Resource(BUCKET_TYPE, f"projects/_/buckets/{m['bucket']}")
            return "objects.list", [("storage.objects.list", bucket)]
        if (m := _UPLOAD.match(path)) and verb == "POST":
            name = self.query.get("name") or self._name_in_body()
            if not name:
                return NOT_MODELLED
            return "objects.insert", self._create_needs(m["bucket"], name)
        return NOT_MODELLED

    def _create_needs(self, bucket: str, name: str) -> list[Need]:
        needs = [("storage.objects.create", _object(bucket, name))]
        proxy: GcsIamProxy = self.server.owner  # type: ignore[attr-defined]
        if self.query.get("ifGenerationMatch") != "0" and proxy.object_exists(bucket, name):
            needs.append(("storage.objects.delete", _object(bucket, name)))
        return needs

    def _name_in_body(self) -> str | None:
        """The object name of a multipart or resumable upload's metadata (JSON)."""
        body = self.raw_body
        start, end = body.find(b"{"), body.find(b"}")
        if start < 0 or end < start:
            return None
        try:
            return json.loads(body[start : end + 1]).get("name")
        except (ValueError, AttributeError):
            return None

    def _deny(self, proxy: GcsIamProxy, account: str, refused: Need | None) -> None:
        permission, resource = refused or ("storage.objects.get", Resource(BUCKET_TYPE, "?"))
        proxy.denied.append((account, self.command, self.url_path))
        message = (
            f"{account} does not have {permission} access to the Google Cloud Storage "
            f"object. Permission '{permission}' denied on resource (or it may not exist)."
        )
        self._forbidden(message)

    def _deny_scope(self, proxy: GcsIamProxy, account: str) -> None:
        proxy.denied.append((account, self.command, self.url_path))
        proxy.denied_for_scope.append((account, self.command, self.url_path))
        self._forbidden("Provided scope(s) are not authorized")

    def _forbidden(self, message: str) -> None:
        """Cloud Storage's 403 error body, as its JSON API returns one."""
        error = {"message": message, "domain": "global", "reason": "forbidden"}
        self.reply_json(403, {"error": {"code": 403, "message": message, "errors": [error]}})

    def _policy(self, proxy: GcsIamProxy, bucket: str) -> None:
        status, _, _ = proxy.upstream_request("GET", f"/storage/v1/b/{bucket}", b"", {})
        if status != 200:
            self.reply_json(
                404, {"error": {"code": 404, "message": "The specified bucket does not exist."}}
            )
            return
        # A policy holding a condition is version 3
        # (https://cloud.google.com/iam/docs/policies#versions).
        conditional = any("condition" in b for b in proxy.bindings)
        policy: dict[str, Any] = {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{bucket}",
            "version": 3 if conditional else 1,
            "etag": f"CA{proxy.etag}=",
            "bindings": proxy.bindings,
        }
        discovery.validate_response("storage", "v1", "buckets.getIamPolicy", policy)
        self.reply_json(200, policy)

    def _bucket_resource(self, proxy: GcsIamProxy, bucket: str) -> None:
        """buckets.get, with the uniform bucket-level access the proxy keeps."""
        status, _, body = proxy.upstream_request("GET", self.path, b"", {})
        if status != 200:
            self.reply(status, body, "application/json")
            return
        resource = json.loads(body)
        enabled = proxy.uniform_access.get(bucket, True)
        iam_configuration = resource.setdefault("iamConfiguration", {})
        iam_configuration["uniformBucketLevelAccess"] = {"enabled": enabled}
        iam_configuration["bucketPolicyOnly"] = {"enabled": enabled}
        if bucket in proxy.lifecycle:
            resource["lifecycle"] = proxy.lifecycle[bucket]
        self.reply_json(200, resource)

    def _patch_bucket(self, proxy: GcsIamProxy, bucket: str) -> None:
        """buckets.patch: the lifecycle configuration is kept here, the rest forwarded."""
        body = self.json_body()
        query = {k: v for k, v in self.query.items() if k not in ("alt", "prettyPrint")}
        try:
            discovery.validate_call("storage", "v1", "buckets.patch", query, body)
            problem = _lifecycle_problem(body.get("lifecycle"))
        except discovery.DiscoveryError as e:
            proxy.schema_violations.append(f"request buckets.patch: {e}")
            problem = str(e)
        if problem:
            self.reply_json(400, {"error": {"code": 400, "message": problem}})
            return
        rest = {k: v for k, v in body.items() if k != "lifecycle"}
        status, _, answer = proxy.upstream_request(
            "PATCH" if rest else "GET",
            f"/storage/v1/b/{bucket}",
            json.dumps(rest).encode() if rest else b"",
            {"Content-Type": "application/json"},
        )
        if status != 200:
            self.reply(status, answer, "application/json")
            return
        if "lifecycle" in body:
            proxy.lifecycle[bucket] = body["lifecycle"] or {}
        self.path = f"/storage/v1/b/{bucket}"
        self._bucket_resource(proxy, bucket)

    def _set_policy(self, proxy: GcsIamProxy, bucket: str) -> None:
        """buckets.setIamPolicy: the policy's bindings become the proxy's."""
        policy = self.json_body()
        try:
            discovery.validate("storage", "v1", "Policy", policy)
        except discovery.DiscoveryError as e:
            proxy.schema_violations.append(f"request buckets.setIamPolicy: {e}")
            self.reply_json(400, {"error": {"code": 400, "message": str(e)}})
            return
        bindings = policy.get("bindings", [])
        if any("condition" in b for b in bindings) and policy.get("version") != 3:
            message = "IAM policy with conditions must be version 3"
            self.reply_json(400, {"error": {"code": 400, "message": message}})
            return
        if any("condition" in b for b in bindings) and not proxy.uniform_access.get(bucket, True):
            message = (
                "IAM Conditions can only be set on a bucket with uniform bucket-level access "
                "enabled"
            )
            self.reply_json(400, {"error": {"code": 400, "message": message}})
            return
        # A member the IAM stand-in cannot see yet (a new service account) is refused, as a
        # project policy refuses it (iam_server.py).
        added = {m for b in bindings for m in b.get("members", [])} - proxy.members()
        for member in sorted(added):
            problem = proxy.member_problem(member)
            if problem:
                self.reply_json(400, {"error": {"code": 400, "message": problem}})
                return
        proxy.bindings = [{**b, "members": sorted(b["members"])} for b in bindings]
        proxy.etag += 1
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


_LIFECYCLE_ACTIONS = ("Delete", "SetStorageClass", "AbortIncompleteMultipartUpload")


def _lifecycle_problem(lifecycle: Any) -> str | None:
    """Why Cloud Storage would refuse this lifecycle configuration, or None."""
    for rule in (lifecycle or {}).get("rule") or []:
        action = (rule.get("action") or {}).get("type")
        if action not in _LIFECYCLE_ACTIONS:
            return f"Invalid lifecycle action type {action!r}"
        condition = rule.get("condition") or {}
        if not condition:
            return "A lifecycle rule needs at least one condition"
        if condition.get("age", 0) < 0:
            return "The age of a lifecycle condition must not be negative"
    return None


class GcsIamProxy(LoopbackStandIn):
    """The proxy on its own loopback port; `endpoint` replaces fake-gcs-server's."""

    handler_class = _ProxyHandler

    def __init__(
        self,
        upstream: str,
        identity_of: Callable[[str], TokenIdentity | None],
        custom_roles: Mapping[str, Mapping[str, Any]] | None = None,
        member_problem: Callable[[str], str | None] = lambda member: None,
        public_key_of: Callable[[str], Any] = lambda email: None,
    ) -> None:
        super().__init__()
        # A service account's public key (None: unknown), e.g. the IAM stand-in's.
        self.public_key_of = public_key_of
        # Why a policy may not name a member now, e.g. the IAM stand-in's `member_problem`.
        self.member_problem = member_problem
        self.upstream = urlsplit(upstream)
        self.identity_of = identity_of
        # Custom roles by name (projects/P/roles/ID -> Role), e.g. the IAM stand-in's `roles`.
        self.custom_roles: Mapping[str, Mapping[str, Any]] = (
            {} if custom_roles is None else custom_roles
        )
        self.bindings: list[dict[str, Any]] = []
        self.etag = 1
        # Uniform bucket-level access of each bucket created through the proxy.
        self.uniform_access: dict[str, bool] = {}
        # Each bucket's lifecycle configuration (Bucket.lifecycle), as buckets.patch set it.
        self.lifecycle: dict[str, dict[str, Any]] = {}
        self.denied: list[tuple[str, str, str]] = []  # (account, method, path) refused
        # Those of `denied` refused for the token's access scopes, before IAM was asked.
        self.denied_for_scope: list[tuple[str, str, str]] = []

    def grant(
        self, member: str, role: str = OBJECT_ROLE, condition: dict[str, str] | None = None
    ) -> None:
        binding: dict[str, Any] = {"role": role, "members": [member]}
        if condition:
            binding["condition"] = condition
        self.bindings.append(binding)

    def members(self) -> set[str]:
        return {m for b in self.bindings for m in b["members"]}

    def allowed(self, member: str, permission: str, resource: Resource) -> bool:
        roles = predefined_or(self.custom_roles)
        return allows(self.bindings, roles, member, permission, resource)

    def object_exists(self, bucket: str, name: str) -> bool:
        path = f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
        status, _, _ = self.upstream_request("GET", path, b"", {})
        return status == 200

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
