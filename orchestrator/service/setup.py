"""setup: the least-privilege one-time setup of a project for bench.

`setup_steps` is a pure builder: each step is the gcloud command a reader can check line by
line and the request `--apply` sends for it (IAM v1 and Resource Manager v3 over REST with
google-auth, the bucket through the Storage client). What it creates:

1. the bucket (uniform bucket-level access);
2. a service account for bench VMs, `bench-vm@<project>.iam.gserviceaccount.com`;
3. roles/storage.objectUser for that account on that bucket only (read the payload, write
   results);
4. a custom role holding only compute.instances.delete;
5. that role granted to the account under an IAM condition: instances named bench-* only,
   so a VM can delete itself (and other bench VMs) and nothing else.

Then `service_account = "<that email>"` in bench.toml: bench adds the compute scope for it,
and each run's VM deletes itself when done.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.config import region_of
from orchestrator.errors import CloudError, PermissionDeniedError
from orchestrator.service.context import Context, require_gce_settings

VM_ACCOUNT_ID = "bench-vm"
SELF_DELETE_ROLE_ID = "benchSelfDelete"
INSTANCE_PREFIX = "bench-"
OBJECT_ROLE = "roles/storage.objectUser"
# IAM conditions can test a Compute instance's resource.name
# (https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name).
SELF_DELETE_CONDITION = (
    'resource.type == "compute.googleapis.com/Instance" && '
    f'resource.name.extract("/instances/{{name}}").startsWith("{INSTANCE_PREFIX}")'
)
IAM_ENDPOINT = "https://iam.googleapis.com"
RESOURCEMANAGER_ENDPOINT = "https://cloudresourcemanager.googleapis.com"


@dataclass(frozen=True)
class SetupStep:
    title: str
    command: list[str]  # the gcloud equivalent, one argument per item
    apply: Callable[[SetupClient], str]  # performs the step; returns what it did

    def command_line(self) -> str:
        return " ".join(shlex.quote(part) for part in self.command)


def vm_account_email(project: str) -> str:
    return f"{VM_ACCOUNT_ID}@{project}.iam.gserviceaccount.com"


def setup_steps(project: str, bucket: str, region: str) -> list[SetupStep]:
    email = vm_account_email(project)
    member = f"serviceAccount:{email}"
    role = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
    return [
        SetupStep(
            f"bucket gs://{bucket} in {region}",
            [
                "gcloud",
                "storage",
                "buckets",
                "create",
                f"gs://{bucket}",
                f"--project={project}",
                f"--location={region}",
                "--uniform-bucket-level-access",
            ],
            lambda c: c.create_bucket(region),
        ),
        SetupStep(
            f"service account {email} for bench VMs",
            [
                "gcloud",
                "iam",
                "service-accounts",
                "create",
                VM_ACCOUNT_ID,
                f"--project={project}",
                "--display-name=bench VMs",
            ],
            lambda c: c.create_account(),
        ),
        SetupStep(
            f"{OBJECT_ROLE} for it on gs://{bucket} only",
            [
                "gcloud",
                "storage",
                "buckets",
                "add-iam-policy-binding",
                f"gs://{bucket}",
                f"--member={member}",
                f"--role={OBJECT_ROLE}",
            ],
            lambda c: c.grant_bucket(member),
        ),
        SetupStep(
            "a custom role holding only compute.instances.delete",
            [
                "gcloud",
                "iam",
                "roles",
                "create",
                SELF_DELETE_ROLE_ID,
                f"--project={project}",
                "--title=bench VM self-delete",
                "--permissions=compute.instances.delete",
                "--stage=GA",
            ],
            lambda c: c.create_role(),
        ),
        SetupStep(
            f"that role for it, on instances named {INSTANCE_PREFIX}* only",
            [
                "gcloud",
                "projects",
                "add-iam-policy-binding",
                project,
                f"--member={member}",
                f"--role={role}",
                f"--condition=expression={SELF_DELETE_CONDITION},title=bench instances only",
            ],
            lambda c: c.grant_role_with_condition(member, role),
        ),
    ]


class SetupClient:
    """The calls `--apply` makes; 409 ALREADY_EXISTS means an earlier run did it."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.project: str = ctx.config.project
        self._session = _session(ctx.config)
        self._iam = (ctx.config.iam_endpoint or IAM_ENDPOINT).rstrip("/")
        self._crm = (ctx.config.resourcemanager_endpoint or RESOURCEMANAGER_ENDPOINT).rstrip("/")

    def _request(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        import requests

        try:
            reply = self._session.request(method, url, json=body, timeout=60)
        except requests.RequestException as e:
            raise CloudError(f"cannot reach {url.split('/v')[0]} ({e})") from e
        payload = reply.json() if reply.content else {}
        if reply.status_code in (401, 403):
            raise PermissionDeniedError(
                f"{method} {url} was refused ({reply.status_code}): "
                f"{payload.get('error', {}).get('message', '')}; setup needs a project Owner "
                "(or roles/iam.serviceAccountAdmin, roles/iam.roleAdmin, "
                "roles/resourcemanager.projectIamAdmin and roles/storage.admin)"
            )
        if reply.status_code not in (200, 409):
            raise CloudError(f"{method} {url} failed ({reply.status_code}): {payload}")
        return reply.status_code, payload

    def create_bucket(self, region: str) -> str:
        store = self.ctx.store("gce")
        if store.bucket_exists():
            return "exists already"
        store.create_bucket(region)
        return "created"

    def create_account(self) -> str:
        status, _ = self._request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/serviceAccounts",
            {"accountId": VM_ACCOUNT_ID, "serviceAccount": {"displayName": "bench VMs"}},
        )
        return "exists already" if status == 409 else "created"

    def grant_bucket(self, member: str) -> str:
        self.ctx.store("gce").grant(OBJECT_ROLE, member)
        return "granted"

    def create_role(self) -> str:
        status, _ = self._request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/roles",
            {
                "roleId": SELF_DELETE_ROLE_ID,
                "role": {
                    "title": "bench VM self-delete",
                    "description": "Lets a bench VM delete itself when its run ends.",
                    "includedPermissions": ["compute.instances.delete"],
                    "stage": "GA",
                },
            },
        )
        return "exists already" if status == 409 else "created"

    def grant_role_with_condition(self, member: str, role: str) -> str:
        url = f"{self._crm}/v3/projects/{self.project}"
        _, policy = self._request(
            "POST", f"{url}:getIamPolicy", {"options": {"requestedPolicyVersion": 3}}
        )
        binding = {
            "role": role,
            "members": [member],
            "condition": {"title": "bench instances only", "expression": SELF_DELETE_CONDITION},
        }
        bindings = policy.get("bindings", [])
        if any(b.get("role") == role and member in b.get("members", []) for b in bindings):
            return "granted already"
        # Conditions need policy version 3; the etag makes a concurrent change fail (409).
        new_policy = {**policy, "version": 3, "bindings": [*bindings, binding]}
        status, _ = self._request("POST", f"{url}:setIamPolicy", {"policy": new_policy})
        if status == 409:
            raise CloudError("the project's IAM policy changed meanwhile; run setup again")
        return "granted"


def _session(config):
    """Plain HTTP to stand-in endpoints; Application Default Credentials otherwise."""
    import requests

    if config.iam_endpoint or config.resourcemanager_endpoint:
        return requests.Session()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    except DefaultCredentialsError as e:
        raise PermissionDeniedError(
            f"no Google credentials found ({e}); run `gcloud auth application-default login`"
        ) from None
    return AuthorizedSession(credentials)


def plan_setup(ctx: Context) -> list[SetupStep]:
    require_gce_settings(ctx.config)
    return setup_steps(ctx.config.project, ctx.config.bucket, region_of(ctx.config.zones[0]))


def apply_setup(ctx: Context, steps: list[SetupStep], on_done: Callable[[SetupStep, str], None]):
    client = SetupClient(ctx)
    for step in steps:
        on_done(step, step.apply(client))
