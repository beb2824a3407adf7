"""Loopback stand-in for the IAM v1 and Resource Manager v3 calls `bench setup --apply` makes.

  POST /v1/projects/{p}/serviceAccounts              iam projects.serviceAccounts.create
  GET  /v1/projects/{p}/serviceAccounts/{email}      iam projects.serviceAccounts.get
  POST /v1/projects/{p}/serviceAccounts/{email}:testIamPermissions
                                                     iam projects.serviceAccounts.testIamPermissions
  POST /v1/projects/{p}/serviceAccounts/{email}:getIamPolicy
                                                     iam projects.serviceAccounts.getIamPolicy
  POST /v1/projects/{p}/serviceAccounts/{email}:setIamPolicy
                                                     iam projects.serviceAccounts.setIamPolicy
  POST /v1/projects/{p}/roles                        iam projects.roles.create
  GET  /v1/projects/{p}/roles/{id}                   iam projects.roles.get
  PATCH /v1/projects/{p}/roles/{id}                  iam projects.roles.patch
  POST /v3/projects/{p}:getIamPolicy                 cloudresourcemanager projects.getIamPolicy
  POST /v3/projects/{p}:setIamPolicy                 cloudresourcemanager projects.setIamPolicy
  POST /v3/projects/{p}:testIamPermissions
                                         cloudresourcemanager projects.testIamPermissions
  POST /v1/projects/-/serviceAccounts/{email}:signBlob
                                         iamcredentials projects.serviceAccounts.signBlob
  POST /v1/projects/{p}:getEffectiveOrgPolicy
                                         cloudresourcemanager (v1) projects.getEffectiveOrgPolicy

Rules, as documented: creating what exists answers 409 ALREADY_EXISTS
(https://cloud.google.com/iam/docs/service-accounts-create,
https://cloud.google.com/iam/docs/creating-custom-roles); a service account's email is
`<accountId>@<project>.iam.gserviceaccount.com`; a policy with conditions must be version
3, and setIamPolicy refuses a stale etag with 409 ABORTED
(https://cloud.google.com/iam/docs/policies#versions,
https://cloud.google.com/iam/docs/policies#etag). A new project's policy makes its creator
(the caller without a token, CONTROLLER_MEMBER) its owner; reading or setting it needs
resourcemanager.projects.getIamPolicy / setIamPolicy. testIamPermissions answers the subset
of the permissions the caller holds on the project, or on the service account through the
project's policy (https://cloud.google.com/iam/docs/testing-permissions). A new service
account is not usable at once: "you might need to wait for 60 seconds or more before you use
the service account" (https://cloud.google.com/iam/docs/service-accounts-create): the first
`unusable_uses` policy changes naming it are refused with 400 "does not exist", as Google
answers a grant to an account it cannot see yet (`member_problem`, also used by the bucket
proxy). Every request and answer is checked against the iam v1 / cloudresourcemanager v3
discovery documents.

A service account is a resource with an allow policy of its own, read and written with
getIamPolicy / setIamPolicy ("Use this method to grant or revoke access to the service
account", https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/setIamPolicy,
https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/getIamPolicy):
the caller needs iam.serviceAccounts.getIamPolicy / setIamPolicy on the account (the
project's owner has them), the account must exist (404), and setIamPolicy keeps the etag
and member rules of the project's. A permission on the account is held through the
project's policy or the account's own (https://cloud.google.com/iam/docs/manage-access-service-accounts).
`caller` is who a request comes from (requests carry no token here): the developer running
bench, CONTROLLER_MEMBER, unless a test launches as someone else.

signBlob signs with the account's own key, "a system-managed private key" that never leaves
Google; the caller needs iam.serviceAccounts.signBlob on the account, which
roles/iam.serviceAccountTokenCreator holds
(https://cloud.google.com/iam/docs/service-account-permissions#token-creator-role), and with the `-`
wildcard an account that does not exist answers 403, not 404
(https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/signBlob,
https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/signBlob). The
signature is RSASSA-PKCS1-v1_5 over SHA-256, what a V4 signature is
(https://cloud.google.com/storage/docs/authentication/signatures); `public_key(email)` is the
key Google publishes for it, for the bucket proxy to verify with.

getEffectiveOrgPolicy answers the OrgPolicy a test set in `org_policies[(project,
constraint)]`, else one naming the constraint alone: no policy set anywhere, the
constraint's default (https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy).
The caller needs orgpolicy.policy.get on the project, as roles/orgpolicy.policyViewer holds
it (https://cloud.google.com/iam/docs/roles-permissions/orgpolicy); a project's owner does.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from . import discovery
from .http_base import JsonHandler, LoopbackStandIn
from .iam_policy import CONTROLLER_MEMBER, Resource, granted, new_project_policy, predefined_or

_ROUTES = [
    (
        "POST",
        r"^/v1/projects/(?P<p>-)/serviceAccounts/(?P<id>[^/:]+):signBlob$",
        "iamcredentials",
        "v1",
        "projects.serviceAccounts.signBlob",
    ),
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
    (
        "POST",
        r"^/v1/projects/(?P<p>[^/]+)/serviceAccounts/(?P<id>[^/:]+):testIamPermissions$",
        "iam",
        "v1",
        "projects.serviceAccounts.testIamPermissions",
    ),
    (
        "POST",
        r"^/v1/projects/(?P<p>[^/]+)/serviceAccounts/(?P<id>[^/:]+):getIamPolicy$",
        "iam",
        "v1",
        "projects.serviceAccounts.getIamPolicy",
    ),
    (
        "POST",
        r"^/v1/projects/(?P<p>[^/]+)/serviceAccounts/(?P<id>[^/:]+):setIamPolicy$",
        "iam",
        "v1",
        "projects.serviceAccounts.setIamPolicy",
    ),
    ("POST", r"^/v1/projects/(?P<p>[^/]+)/roles$", "iam", "v1", "projects.roles.create"),
    ("GET", r"^/v1/projects/(?P<p>[^/]+)/roles/(?P<id>[^/]+)$", "iam", "v1", "projects.roles.get"),
    (
        "PATCH",
        r"^/v1/projects/(?P<p>[^/]+)/roles/(?P<id>[^/]+)$",
        "iam",
        "v1",
        "projects.roles.patch",
    ),
    (
        "POST",
        r"^/v1/projects/(?P<p>[^/:]+):getEffectiveOrgPolicy$",
        "cloudresourcemanager",
        "v1",
        "projects.getEffectiveOrgPolicy",
    ),
    (
        "POST",
        r"^/v3/projects/(?P<p>[^/:]+):testIamPermissions$",
        "cloudresourcemanager",
        "v3",
        "projects.testIamPermissions",
    ),
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


_PROJECT = "cloudresourcemanager.googleapis.com/Project"


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

    def __init__(self, unusable_uses: int = 2) -> None:
        super().__init__()
        self.accounts: dict[str, dict[str, Any]] = {}  # email -> ServiceAccount
        self.roles: dict[str, dict[str, Any]] = {}  # projects/p/roles/id -> Role
        self.policies: dict[str, dict[str, Any]] = {}  # project -> Policy
        self.account_policies: dict[str, dict[str, Any]] = {}  # email -> its own Policy
        self.caller = CONTROLLER_MEMBER
        # (project, constraint) -> the effective OrgPolicy getEffectiveOrgPolicy answers.
        self.org_policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.unusable_uses = unusable_uses
        self.refused_uses: dict[str, int] = {}  # email -> uses refused while propagating
        self._etags = 0
        self._keys: dict[str, Any] = {}  # email -> its private key, made on first use
        self._keys_made = threading.Lock()

    def _key(self, email: str):
        """The account's one signing key, made once even when its first signBlob calls come
        together (the server answers each request on a thread of its own)."""
        from cryptography.hazmat.primitives.asymmetric import rsa

        with self._keys_made:
            if email not in self._keys:
                self._keys[email] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            return self._keys[email]

    def public_key(self, email: str):
        """The account's public key (None: it signed nothing), as Google publishes it."""
        key = self._keys.get(email)
        return None if key is None else key.public_key()

    def _sign_blob(self, email: str, body: Any) -> dict[str, Any]:
        import base64

        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        project = email.partition("@")[2].split(".")[0]
        resource = Resource(
            "iam.googleapis.com/ServiceAccount", f"projects/{project}/serviceAccounts/{email}"
        )
        permission = "iam.serviceAccounts.signBlob"
        if email not in self.accounts or not self._granted(project, resource, [permission]):
            raise IamError(
                403, "PERMISSION_DENIED", f"Permission '{permission}' denied on resource"
            )
        payload = base64.b64decode(body["payload"])
        signature = self._key(email).sign(payload, padding.PKCS1v15(), hashes.SHA256())
        return {"keyId": f"{email}-key", "signedBlob": base64.b64encode(signature).decode()}

    def policy(self, project: str) -> dict[str, Any]:
        return self.policies.setdefault(project, {**new_project_policy(), "etag": "BwAAAA=="})

    def account_exists(self, email: str) -> bool:
        """A created account, or a project's default compute account (created with the
        project when the Compute API is enabled)."""
        return email in self.accounts or email.endswith("-compute@developer.gserviceaccount.com")

    def member_problem(self, member: str) -> str | None:
        """Why a policy may not name `member` now: a service account that does not exist,
        or a new one not visible yet (each such use counts down `unusable_uses`)."""
        kind, _, email = member.partition(":")
        if kind != "serviceAccount":
            return None
        if not self.account_exists(email):
            return f"Service account {email} does not exist."
        refused = self.refused_uses.get(email)
        if refused is not None and refused < self.unusable_uses:
            self.refused_uses[email] = refused + 1
            return f"Service account {email} does not exist."
        return None

    def handle(self, name: str, p: dict[str, str], body: Any) -> dict[str, Any]:
        if name == "projects.serviceAccounts.signBlob":
            return self._sign_blob(p["id"], body)
        project = p["p"]
        if name == "projects.serviceAccounts.create":
            return self._create_account(project, body)
        if name == "projects.serviceAccounts.get":
            if p["id"] not in self.accounts:
                raise IamError(404, "NOT_FOUND", f"Unknown service account {p['id']}")
            return self.accounts[p["id"]]
        if name in (
            "projects.serviceAccounts.getIamPolicy",
            "projects.serviceAccounts.setIamPolicy",
        ):
            return self._account_policy(name, project, p["id"], body)
        if name == "projects.serviceAccounts.testIamPermissions":
            if not self.account_exists(p["id"]):
                raise IamError(404, "NOT_FOUND", f"Unknown service account {p['id']}")
            resource = Resource(
                "iam.googleapis.com/ServiceAccount", f"projects/{project}/serviceAccounts/{p['id']}"
            )
            return self._test(project, resource, body)
        if name == "projects.testIamPermissions":
            return self._test(project, Resource(_PROJECT, f"projects/{project}"), body)
        if name == "projects.getEffectiveOrgPolicy":
            self._require(project, "orgpolicy.policy.get")
            constraint = body["constraint"]
            return self.org_policies.get((project, constraint), {"constraint": constraint})
        if name in ("projects.roles.create", "projects.roles.get", "projects.roles.patch"):
            return self._role(name, project, p.get("id") or body.get("roleId"), body)
        self._require(project, f"resourcemanager.{name}")
        if name == "projects.getIamPolicy":
            return self.policy(project)
        return self._set_policy(project, body["policy"])

    def create_account(self, project: str, account_id: str) -> dict[str, Any]:
        """What serviceAccounts.create does, for a test that needs an account to exist."""
        return self._create_account(project, {"accountId": account_id})

    def _create_account(self, project: str, body: Any) -> dict[str, Any]:
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
        self.refused_uses[email] = 0
        return account

    def _role(self, name: str, project: str, role_id: str, body: Any) -> dict[str, Any]:
        role_name = f"projects/{project}/roles/{role_id}"
        if name == "projects.roles.create":
            if role_name in self.roles:
                raise IamError(409, "ALREADY_EXISTS", f"A role named {role_id} exists")
            role = {**body.get("role", {}), "name": role_name, "etag": "BwAAAA=="}
            self.roles[role_name] = role
            return role
        if role_name not in self.roles:
            raise IamError(404, "NOT_FOUND", f"Role {role_name} not found")
        if name == "projects.roles.patch":
            # Only the updateMask's fields change (projects.roles.patch in the iam v1
            # discovery document); bench sends includedPermissions alone.
            self.roles[role_name]["includedPermissions"] = list(body["includedPermissions"])
        return self.roles[role_name]

    def account_policy(self, email: str) -> dict[str, Any]:
        """A service account's own policy: a new account's is empty."""
        return self.account_policies.setdefault(email, {"version": 1, "etag": "BwAAAA=="})

    def _account_policy(self, name: str, project: str, email: str, body: Any) -> dict[str, Any]:
        if email not in self.accounts:
            raise IamError(404, "NOT_FOUND", f"Unknown service account {email}")
        permission = f"iam.{name.removeprefix('projects.')}"
        resource = Resource(
            "iam.googleapis.com/ServiceAccount", f"projects/{project}/serviceAccounts/{email}"
        )
        if not self._granted(project, resource, [permission]):
            raise IamError(
                403, "PERMISSION_DENIED", f"Permission '{permission}' denied on resource"
            )
        current = self.account_policy(email)
        if name.endswith("getIamPolicy"):
            return current
        policy = body["policy"]
        self._check_policy(current, policy)
        self._etags += 1
        stored = {**policy, "etag": f"BwAAA{self._etags}=="}
        self.account_policies[email] = stored
        return stored

    def _require(self, project: str, permission: str) -> None:
        resource = Resource(_PROJECT, f"projects/{project}")
        if not self._granted(project, resource, [permission]):
            raise IamError(
                403,
                "PERMISSION_DENIED",
                f"The caller does not have permission {permission} on projects/{project}",
            )

    def bindings_on(self, project: str, resource: Resource) -> list[dict[str, Any]]:
        """The bindings that hold on `resource`: the project's, and the service account's
        own when `resource` is one (a policy is inherited down the hierarchy,
        https://cloud.google.com/iam/docs/policies#inheritance). The Batch stand-in asks
        this too."""
        bindings = list(self.policy(project).get("bindings", []))
        if resource.type == "iam.googleapis.com/ServiceAccount":
            email = resource.name.rsplit("/", 1)[1]
            bindings += self.account_policies.get(email, {}).get("bindings", [])
        return bindings

    def _granted(self, project: str, resource: Resource, permissions: list[str]) -> list[str]:
        bindings, roles = self.bindings_on(project, resource), predefined_or(self.roles)
        return granted(bindings, roles, self.caller, permissions, resource)

    def _test(self, project: str, resource: Resource, body: Any) -> dict[str, Any]:
        held = self._granted(project, resource, list(body.get("permissions") or []))
        return {"permissions": held} if held else {}

    def _check_policy(self, current: dict[str, Any], policy: dict[str, Any]) -> None:
        """setIamPolicy's rules: the etag read, version 3 with conditions, and a member the
        policy did not name before one Google can see now."""
        if policy.get("etag") != current["etag"]:
            raise IamError(409, "ABORTED", "There were concurrent policy changes.")
        if any("condition" in b for b in policy.get("bindings", [])) and policy.get("version") != 3:
            raise IamError(400, "INVALID_ARGUMENT", "Conditions require policy version 3")
        known = {m for b in current.get("bindings", []) for m in b.get("members", [])}
        for binding in policy.get("bindings", []):
            for member in set(binding.get("members", [])) - known:
                problem = self.member_problem(member)
                if problem:
                    raise IamError(400, "INVALID_ARGUMENT", problem)

    def _set_policy(self, project: str, policy: dict[str, Any]) -> dict[str, Any]:
        current = self.policy(project)
        self._check_policy(current, policy)
        self._etags += 1
        stored = {**policy, "etag": f"BwAAA{self._etags}=="}
        self.policies[project] = stored
        return stored
