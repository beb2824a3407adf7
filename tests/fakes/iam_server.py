"""Loopback stand-in for the IAM v1 and Resource Manager v3 calls `bench setup --apply` makes.

  POST /v1/projects/{p}/serviceAccounts              iam projects.serviceAccounts.create
  GET  /v1/projects/{p}/serviceAccounts/{email}      iam projects.serviceAccounts.get
  POST /v1/projects/{p}/roles                        iam projects.roles.create
  GET  /v1/projects/{p}/roles/{id}                   iam projects.roles.get
  POST /v3/projects/{p}:getIamPolicy                 cloudresourcemanager projects.getIamPolicy
  POST /v3/projects/{p}:setIamPolicy                 cloudresourcemanager projects.setIamPolicy

Rules, as documented: creating what exists answers 409 ALREADY_EXISTS
(https://cloud.google.com/iam/docs/service-accounts-create,
https://cloud.google.com/iam/docs/creating-custom-roles); a service account's email is
`<accountId>@<project>.iam.gserviceaccount.com`; a policy with conditions must be version
3, and setIamPolicy refuses a stale etag with 409 ABORTED
(https://cloud.google.com/iam/docs/policies#versions,
https://cloud.google.com/iam/docs/policies#etag). Every request and answer is checked
against the iam v1 / cloudresourcemanager v3 discovery documents.
"""

from __future__ import annotations

import re
from typing import Any

from . import discovery
from .http_base import JsonHandler, LoopbackStandIn

_ROUTES = [
    (
        "POST",
        r"^/v1/projects/(?P<p>[^/]+)/serviceAccounts$",
        "iam",
        "v1",
        "projects.serviceAccounts.create",
    ),
    (
        "GET",
        r"^/v1/projects/(?P<p>[^/]+)/serviceAccounts/(?P<id>[^/]+)$",
        "iam",
        "v1",
        "projects.serviceAccounts.get",
    ),
    ("POST", r"^/v1/projects/(?P<p>[^/]+)/roles$", "iam", "v1", "projects.roles.create"),
    ("GET", r"^/v1/projects/(?P<p>[^/]+)/roles/(?P<id>[^/]+)$", "iam", "v1", "projects.roles.get"),
    (
        "POST",
        r"^/v3/projects/(?P<p>[^/:]+):getIamPolicy$",
        "cloudresourcemanager",
        "v3",
        "projects.getIamPolicy",
    ),
    (
        "POST",
        r"^/v3/projects/(?P<p>[^/:]+):setIamPolicy$",
        "cloudresourcemanager",
        "v3",
        "projects.setIamPolicy",
    ),
]


class IamError(Exception):
    def __init__(self, status: int, grpc: str, message: str) -> None:
        super().__init__(message)
        self.status, self.grpc, self.message = status, grpc, message

    def payload(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message, "status": self.grpc}}


class _Handler(JsonHandler):
    def handle_request(self) -> None:
        server: FakeIamServer = self.server.owner  # type: ignore[attr-defined]
        for method, pattern, api, version, name in _ROUTES:
            match = re.match(pattern, self.url_path)
            if match and self.command == method:
                body = self.json_body()
                server.calls.append((name, body))
                try:
                    discovery.validate_call(api, version, name, self.query, body)
                except discovery.DiscoveryError as e:
                    server.schema_violations.append(f"request {name}: {e}")
                    self.reply_json(400, IamError(400, "INVALID_ARGUMENT", str(e)).payload())
                    return
                try:
                    answer = server.handle(name, match.groupdict(), body)
                except IamError as e:
                    self.reply_json(e.status, e.payload())
                    return
                discovery.validate_response(api, version, name, answer)
                self.reply_json(200, answer)
                return
        self.reply_json(404, IamError(404, "NOT_FOUND", f"fake: no route {self.path}").payload())


class FakeIamServer(LoopbackStandIn):
    """Service accounts, custom roles and project IAM policies, per project."""

    handler_class = _Handler

    def __init__(self) -> None:
        super().__init__()
        self.accounts: dict[str, dict[str, Any]] = {}  # email -> ServiceAccount
        self.roles: dict[str, dict[str, Any]] = {}  # projects/p/roles/id -> Role
        self.policies: dict[str, dict[str, Any]] = {}  # project -> Policy
        self.calls: list[tuple[str, Any]] = []
        self._etags = 0

    def policy(self, project: str) -> dict[str, Any]:
        return self.policies.setdefault(project, {"version": 1, "etag": "BwAAAA==", "bindings": []})

    def handle(self, name: str, p: dict[str, str], body: Any) -> dict[str, Any]:
        project = p["p"]
        if name == "projects.serviceAccounts.create":
            email = f"{body['accountId']}@{project}.iam.gserviceaccount.com"
            if email in self.accounts:
                raise IamError(409, "ALREADY_EXISTS", f"Service account {email} already exists")
            account = {
                "name": f"projects/{project}/serviceAccounts/{email}",
                "projectId": project,
                "email": email,
                "uniqueId": str(100_000_000_000_000_000_000 + len(self.accounts)),
                "displayName": (body.get("serviceAccount") or {}).get("displayName", ""),
            }
            self.accounts[email] = account
            return account
        if name == "projects.serviceAccounts.get":
            if p["id"] not in self.accounts:
                raise IamError(404, "NOT_FOUND", f"Unknown service account {p['id']}")
            return self.accounts[p["id"]]
        if name == "projects.roles.create":
            role_name = f"projects/{project}/roles/{body['roleId']}"
            if role_name in self.roles:
                raise IamError(409, "ALREADY_EXISTS", f"A role named {body['roleId']} exists")
            role = {**body.get("role", {}), "name": role_name, "etag": "BwAAAA=="}
            self.roles[role_name] = role
            return role
        if name == "projects.roles.get":
            role_name = f"projects/{project}/roles/{p['id']}"
            if role_name not in self.roles:
                raise IamError(404, "NOT_FOUND", f"Role {role_name} not found")
            return self.roles[role_name]
        if name == "projects.getIamPolicy":
            return self.policy(project)
        return self._set_policy(project, body["policy"])

    def _set_policy(self, project: str, policy: dict[str, Any]) -> dict[str, Any]:
        current = self.policy(project)
        if policy.get("etag") != current["etag"]:
            raise IamError(409, "ABORTED", "There were concurrent policy changes.")
        if any("condition" in b for b in policy.get("bindings", [])) and policy.get("version") != 3:
            raise IamError(400, "INVALID_ARGUMENT", "Conditions require policy version 3")
        self._etags += 1
        stored = {**policy, "etag": f"BwAAA{self._etags}=="}
        self.policies[project] = stored
        return stored

    def accounts_allowed_to_delete_bench_instances(self, project: str) -> set[str]:
        """Members that hold a custom role with compute.instances.delete under a condition
        limiting it to bench- instances: what the compute stand-in's VM-token rule needs."""
        allowed = set()
        for binding in self.policy(project).get("bindings", []):
            role = self.roles.get(binding["role"], {})
            condition = (binding.get("condition") or {}).get("expression", "")
            if "compute.instances.delete" in role.get("includedPermissions", []) and (
                'startsWith("bench-")' in condition
            ):
                allowed |= {m.removeprefix("serviceAccount:") for m in binding["members"]}
        return allowed
