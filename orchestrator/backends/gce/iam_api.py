"""IAM v1 and Resource Manager v3 over REST (google-auth's session): the only module that
calls them. `bench setup --apply` creates the VM account and its roles, and lets launchers
sign as the signer account (its own policy); `bench doctor` asks
what the caller may do (testIamPermissions), reads the project's policy and (Resource
Manager v1) the organization policies in effect on the project.

Plain HTTP to stand-in endpoints (iam_endpoint / resourcemanager_endpoint); Application
Default Credentials otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.errors import CloudError, PermissionDeniedError

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

IAM_ENDPOINT = "https://iam.googleapis.com"
RESOURCEMANAGER_ENDPOINT = "https://cloudresourcemanager.googleapis.com"
HTTP_TIMEOUT_SECONDS = 60


class IamRefused(PermissionDeniedError):
    """401/403: these credentials may not make the call."""


class IamRejected(CloudError):
    """Any other answer than 200 or 409; `status` and `message` are Google's."""

    def __init__(self, text: str, status: int, message: str) -> None:
        super().__init__(text)
        self.status, self.message = status, message


class IamApi:
    """One project's IAM calls. 409 ALREADY_EXISTS (or ABORTED) comes back as a status."""

    def __init__(self, config: BenchConfig) -> None:
        self.project: str = config.project
        self._config = config
        self._iam = (config.iam_endpoint or IAM_ENDPOINT).rstrip("/")
        self._crm = (config.resourcemanager_endpoint or RESOURCEMANAGER_ENDPOINT).rstrip("/")
        self._session_cache = None

    def _session(self):
        if self._session_cache is None:
            self._session_cache = _session(self._config)
        return self._session_cache

    def request(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        import requests

        try:
            reply = self._session().request(method, url, json=body, timeout=HTTP_TIMEOUT_SECONDS)
        except requests.RequestException as e:
            raise CloudError(f"cannot reach {url.split('/v')[0]} ({e})") from e
        payload = reply.json() if reply.content else {}
        message = (payload.get("error") or {}).get("message", "") if payload else ""
        if reply.status_code in (401, 403):
            raise IamRefused(f"{method} {url} was refused ({reply.status_code}): {message}")
        if reply.status_code not in (200, 409):
            raise IamRejected(
                f"{method} {url} failed ({reply.status_code}): {message or payload}",
                reply.status_code,
                message,
            )
        return reply.status_code, payload

    # -- IAM v1 --------------------------------------------------------------------------

    def create_account(self, account_id: str, display_name: str) -> bool:
        """False when it exists already."""
        status, _ = self.request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/serviceAccounts",
            {"accountId": account_id, "serviceAccount": {"displayName": display_name}},
        )
        return status != 409

    def create_role(self, role_id: str, role: dict[str, Any]) -> bool:
        """False when a role of that id exists already."""
        status, _ = self.request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/roles",
            {"roleId": role_id, "role": role},
        )
        return status != 409

    def role(self, role_id: str) -> dict[str, Any]:
        _, role = self.request("GET", f"{self._iam}/v1/projects/{self.project}/roles/{role_id}")
        return role

    def set_role_permissions(self, role_id: str, permissions: list[str]) -> None:
        self.request(
            "PATCH",
            f"{self._iam}/v1/projects/{self.project}/roles/{role_id}"
            "?updateMask=includedPermissions",
            {"includedPermissions": permissions},
        )

    def account_permissions(self, email: str, permissions: list[str]) -> set[str] | None:
        """Those of `permissions` the caller holds on the service account; None when the
        account does not exist (404)
        (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/
        testIamPermissions)."""
        try:
            _, answer = self.request(
                "POST",
                f"{self._iam}/v1/projects/{self.project}/serviceAccounts/{email}"
                ":testIamPermissions",
                {"permissions": permissions},
            )
        except IamRejected as e:
            if e.status == 404:
                return None
            raise
        return set(answer.get("permissions", []))

    def account_policy(self, email: str) -> dict[str, Any]:
        """The service account's own allow policy, version 3 so that conditional bindings
        come back whole (https://cloud.google.com/iam/docs/reference/rest/v1/
        projects.serviceAccounts/getIamPolicy)."""
        _, policy = self.request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/serviceAccounts/{email}:getIamPolicy"
            "?options.requestedPolicyVersion=3",
        )
        return policy

    def set_account_policy(self, email: str, policy: dict[str, Any]) -> bool:
        """False when the policy changed since it was read (409: its etag is stale)
        (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/
        setIamPolicy)."""
        status, _ = self.request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/serviceAccounts/{email}:setIamPolicy",
            {"policy": policy},
        )
        return status != 409

    # -- Resource Manager v3 ---------------------------------------------------------------

    def project_permissions(self, permissions: list[str]) -> set[str]:
        """Those of `permissions` the caller holds on the project
        (https://cloud.google.com/resource-manager/reference/rest/v3/projects/
        testIamPermissions)."""
        _, answer = self.request(
            "POST",
            f"{self._crm}/v3/projects/{self.project}:testIamPermissions",
            {"permissions": permissions},
        )
        return set(answer.get("permissions", []))

    def project_policy(self) -> dict[str, Any]:
        """Version 3, so that conditional bindings come back whole."""
        _, policy = self.request(
            "POST",
            f"{self._crm}/v3/projects/{self.project}:getIamPolicy",
            {"options": {"requestedPolicyVersion": 3}},
        )
        return policy

    def set_project_policy(self, policy: dict[str, Any]) -> bool:
        """False when the policy changed since it was read (409: its etag is stale)."""
        status, _ = self.request(
            "POST", f"{self._crm}/v3/projects/{self.project}:setIamPolicy", {"policy": policy}
        )
        return status != 409

    def effective_org_policy(self, constraint: str) -> dict[str, Any]:
        """The project's effective policy for `constraint` (Resource Manager v1,
        https://cloud.google.com/resource-manager/reference/rest/v1/projects/getEffectiveOrgPolicy)."""
        _, policy = self.request(
            "POST",
            f"{self._crm}/v1/projects/{self.project}:getEffectiveOrgPolicy",
            {"constraint": constraint},
        )
        return policy


def _session(config: BenchConfig, endpoint: str | None = None):
    """Plain HTTP to a stand-in (`endpoint`, else the IAM ones when set); else ADC."""
    import requests

    if endpoint or (endpoint is None and (config.iam_endpoint or config.resourcemanager_endpoint)):
        return requests.Session()
    from orchestrator.backends.gce.adaptor import auth, auth_exceptions, auth_requests

    try:
        credentials, _ = auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except auth_exceptions.DefaultCredentialsError as e:
        raise PermissionDeniedError(
            f"no Google credentials found ({e}); run `gcloud auth application-default login`"
        ) from None
    return auth_requests.AuthorizedSession(credentials)
