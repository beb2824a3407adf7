"""setup: the least-privilege one-time setup of a project for bench.

`setup_steps` is a pure builder: each step is the gcloud command a reader can check line by
line and the request `--apply` sends for it (IAM v1 and Resource Manager v3 over REST with
google-auth, the bucket through the Storage client). What it creates, so that code on a
run's VM (a stranger's pull request, in CI) touches only its own run (docs/security.md):

1. the bucket (uniform bucket-level access, which IAM conditions need);
2. a service account for bench VMs, `bench-vm@<project>.iam.gserviceaccount.com`;
3. a custom role holding storage.objects.get/create/delete (never list), granted to that
   account on that bucket for objects under `<prefix>/runs/` only: a VM writes its own
   run's objects, whose key carries a secret it cannot learn for any other run;
4. a custom role holding storage.objects.get alone, granted on `<prefix>/cache/` only:
   a VM reads the build cache and never writes it;
5. a custom role holding only compute.instances.delete;
6. that role granted to the account under an IAM condition on the instance's full resource
   name: instances named bench-* in this project only. Without compute list or get, the
   only such name a VM knows is its own, which carries the run's secret.

Then `service_account = "<that email>"` in bench.toml: bench adds the compute scope for it,
and each run's VM deletes itself when done.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.gce.iam import (
    CACHE_READER_PERMISSIONS,
    CACHE_READER_ROLE_ID,
    INSTANCE_PREFIX,
    OBJECT_WRITER_PERMISSIONS,
    OBJECT_WRITER_ROLE_ID,
    SELF_DELETE_ROLE_ID,
    VM_ACCOUNT_ID,
    objects_condition,
    self_delete_condition,
)
from orchestrator.config import region_of
from orchestrator.errors import CloudError, PermissionDeniedError
from orchestrator.service.context import Context, require_gce_settings

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


def setup_steps(project: str, bucket: str, region: str, prefix: str = "") -> list[SetupStep]:
    email = vm_account_email(project)
    member = f"serviceAccount:{email}"
    delete_role = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
    writer_role = f"projects/{project}/roles/{OBJECT_WRITER_ROLE_ID}"
    reader_role = f"projects/{project}/roles/{CACHE_READER_ROLE_ID}"
    runs_only = objects_condition(bucket, prefix, "runs")
    cache_only = objects_condition(bucket, prefix, "cache")
    delete_only = self_delete_condition(project)
    return [
        SetupStep(
            f"bucket gs://{bucket} in {region}",
            [
                *("gcloud", "storage", "buckets", "create", f"gs://{bucket}"),
                f"--project={project}",
                f"--location={region}",
                "--uniform-bucket-level-access",
            ],
            lambda c: c.create_bucket(region),
        ),
        SetupStep(
            f"service account {email} for bench VMs",
            [
                *("gcloud", "iam", "service-accounts", "create", VM_ACCOUNT_ID),
                f"--project={project}",
                "--display-name=bench VMs",
            ],
            lambda c: c.create_account(),
        ),
        _role_step(project, OBJECT_WRITER_ROLE_ID, "bench run objects", OBJECT_WRITER_PERMISSIONS),
        _bucket_grant_step(bucket, member, writer_role, runs_only, "bench runs only"),
        _role_step(project, CACHE_READER_ROLE_ID, "bench cache reader", CACHE_READER_PERMISSIONS),
        _bucket_grant_step(bucket, member, reader_role, cache_only, "bench cache read"),
        _role_step(
            project, SELF_DELETE_ROLE_ID, "bench VM self-delete", ["compute.instances.delete"]
        ),
        SetupStep(
            f"that role for it, on instances named {INSTANCE_PREFIX}* only",
            [
                *("gcloud", "projects", "add-iam-policy-binding", project),
                f"--member={member}",
                f"--role={delete_role}",
                f"--condition=expression={delete_only},title=bench instances only",
            ],
            lambda c: c.grant_role_with_condition(member, delete_role, delete_only),
        ),
    ]


def _role_step(project: str, role_id: str, title: str, permissions: list[str]) -> SetupStep:
    return SetupStep(
        f"a custom role holding only {', '.join(permissions)}",
        [
            *("gcloud", "iam", "roles", "create", role_id),
            f"--project={project}",
            f"--title={title}",
            f"--permissions={','.join(permissions)}",
            "--stage=GA",
        ],
        lambda c: c.create_role(role_id, title, permissions),
    )


def _bucket_grant_step(
    bucket: str, member: str, role: str, condition: str, title: str
) -> SetupStep:
    return SetupStep(
        f"{role} for it on gs://{bucket}, {title}",
        [
            *("gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{bucket}"),
            f"--member={member}",
            f"--role={role}",
            f"--condition=expression={condition},title={title}",
        ],
        lambda c: c.grant_bucket(member, role, {"title": title, "expression": condition}),
    )


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

    def grant_bucket(self, member: str, role: str, condition: dict[str, str]) -> str:
        granted = self.ctx.store("gce").grant(role, member, condition)
        return "granted" if granted else "granted already"

    def create_role(self, role_id: str, title: str, permissions: list[str]) -> str:
        status, _ = self._request(
            "POST",
            f"{self._iam}/v1/projects/{self.project}/roles",
            {
                "roleId": role_id,
                "role": {
                    "title": title,
                    "description": f"{title}: what a bench VM needs, nothing more.",
                    "includedPermissions": permissions,
                    "stage": "GA",
                },
            },
        )
        return "exists already" if status == 409 else "created"

    def grant_role_with_condition(self, member: str, role: str, condition: str) -> str:
        url = f"{self._crm}/v3/projects/{self.project}"
        _, policy = self._request(
            "POST", f"{url}:getIamPolicy", {"options": {"requestedPolicyVersion": 3}}
        )
        binding = {
            "role": role,
            "members": [member],
            "condition": {"title": "bench instances only", "expression": condition},
        }
        bindings = policy.get("bindings", [])
        if binding in bindings:
            return "granted already"
        # An earlier setup's binding of this role (another condition) gives way to this one.
        kept = [
            b for b in bindings if not (b.get("role") == role and member in b.get("members", []))
        ]
        # Conditions need policy version 3; the etag makes a concurrent change fail (409).
        new_policy = {**policy, "version": 3, "bindings": [*kept, binding]}
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
    config = ctx.config
    return setup_steps(config.project, config.bucket, region_of(config.zones[0]), config.prefix)


def apply_setup(ctx: Context, steps: list[SetupStep], on_done: Callable[[SetupStep, str], None]):
    client = SetupClient(ctx)
    for step in steps:
        on_done(step, step.apply(client))
