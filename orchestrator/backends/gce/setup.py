"""`bench setup` on gce: the least-privilege one-time setup of a project for bench.

`setup_steps` is a pure builder: each step is the gcloud command a reader can check line by
line and the request `--apply` sends for it (IAM v1 and Resource Manager v3 over REST with
google-auth, the bucket through the Storage client). What it creates, so that code on a
run's VM (a stranger's pull request, in CI) touches only its own run (docs/security.md):

1. the bucket (uniform bucket-level access, which IAM conditions need), with a lifecycle
   rule that deletes each object under `<prefix>/runs/` `runs_retention_days` (30) days after
   it was written: payloads and results are not kept, and billed, for ever;
2. a service account for bench VMs, `bench-vm@<project>.iam.gserviceaccount.com`, and one
   that signs each run's grants, `bench-signer@<project>.iam.gserviceaccount.com`;
3. a custom role holding storage.objects.get/create/delete (never list), granted to the
   signer on that bucket for objects under `<prefix>/runs/` only. The VM account gets no
   role there: every name is public, so a VM reaches its own run's objects only through the
   URL and upload policy launch signs for that run (backends/gce/signing.py);
4. a custom role holding storage.objects.get alone, granted to the VM account on
   `<prefix>/cache/` only: a VM reads the build cache and never writes it;
5. a custom role holding only compute.instances.delete and compute.disks.delete (a VM's
   delete takes its auto-delete boot disk with it; backends/gce/iam.py says why both);
6. that role granted to the VM account under an IAM condition on full resource names:
   instances and disks named bench-* in this project only. Names are public (internal DNS),
   so a VM could delete another live bench VM: docs/security.md states it and the audit-log
   query that shows it;
7. for each launcher (`--launcher MEMBER`, by default the caller when its credentials are
   a service account's), roles/iam.serviceAccountTokenCreator on the signer account alone:
   what signBlob needs (https://cloud.google.com/iam/docs/service-account-permissions#token-creator-role),
   granted in the account's own policy
   (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/setIamPolicy),
   not the project's, so it reaches no other account.

After creating a service account "you might need to wait for 60 seconds or more before you
use the service account" (https://cloud.google.com/iam/docs/service-accounts-create): the
grants naming it are retried with exponential backoff
(https://cloud.google.com/iam/docs/retry-strategy) for about two minutes.

Then `service_account = "<that email>"` in bench.toml: bench adds the compute scope for it,
and each run's VM deletes itself when done.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import SetupStep
from orchestrator.backends.gce.iam import (
    CACHE_READER_PERMISSIONS,
    CACHE_READER_ROLE_ID,
    INSTANCE_PREFIX,
    OBJECT_WRITER_PERMISSIONS,
    OBJECT_WRITER_ROLE_ID,
    SELF_DELETE_PERMISSIONS,
    SELF_DELETE_ROLE_ID,
    VM_ACCOUNT_ID,
    objects_condition,
    self_delete_condition,
)
from orchestrator.backends.gce.iam_api import IamApi, IamRefused
from orchestrator.backends.gce.signing import SIGNER_ACCOUNT_ID
from orchestrator.config import region_of
from orchestrator.errors import (
    BenchError,
    CloudError,
    ConfigError,
    PermissionDeniedError,
    UsageError,
)

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig
    from orchestrator.stores.gcs import GcsStore

# Waits between tries of a grant that names the new account (≈ 2 min in all): Google's
# truncated exponential backoff (https://cloud.google.com/iam/docs/retry-strategy).
PROPAGATION_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
SELF_DELETE_TITLE = "bench instances only"
TOKEN_CREATOR = "roles/iam.serviceAccountTokenCreator"
# The principal forms a launcher may take: one person, a group, a service account
# (https://cloud.google.com/iam/docs/principal-identifiers).
_LAUNCHER = re.compile(r"^(user|group|serviceAccount):[^@\s:]+@[^@\s:]+\.[^@\s:]+$")


def vm_account_email(project: str) -> str:
    return f"{VM_ACCOUNT_ID}@{project}.iam.gserviceaccount.com"


def signer_account_email(project: str) -> str:
    return f"{SIGNER_ACCOUNT_ID}@{project}.iam.gserviceaccount.com"


# The file the printed lifecycle command reads (gcloud takes the configuration from a file).
LIFECYCLE_FILE = "bench-lifecycle.json"


def runs_lifecycle_rule(prefix: str, days: int) -> dict[str, Any]:
    """Delete an object under <prefix>/runs/ `days` days after it was created: the Delete
    action with the `age` and `matchesPrefix` conditions
    (https://cloud.google.com/storage/docs/lifecycle#age,
    https://cloud.google.com/storage/docs/lifecycle#matchesprefix-suffix). cache/ is kept."""
    runs = "/".join(part for part in (prefix.strip("/"), "runs") if part) + "/"
    return {"action": {"type": "Delete"}, "condition": {"age": days, "matchesPrefix": [runs]}}


def lifecycle_step(bucket: str, prefix: str, days: int) -> SetupStep:
    rule = runs_lifecycle_rule(prefix, days)
    (runs,) = rule["condition"]["matchesPrefix"]
    return SetupStep(
        f"a lifecycle rule on gs://{bucket}: each object under {runs} (a run's payload and "
        f"results) is deleted {days} days after it was written (runs_retention_days = {days} "
        f"in bench.toml changes it); {LIFECYCLE_FILE} holds {json.dumps({'rule': [rule]})} "
        "(gcloud replaces the bucket's rules with the file's; --apply keeps the others)",
        [
            *("gcloud", "storage", "buckets", "update", f"gs://{bucket}"),
            f"--lifecycle-file={LIFECYCLE_FILE}",
        ],
        lambda c: c.keep_lifecycle_rule(rule),
    )


def check_launcher(member: str) -> str:
    """`member` when it names one principal as IAM writes it; UsageError otherwise."""
    if not _LAUNCHER.match(member):
        raise UsageError(
            f"--launcher {member!r} is not an IAM member: write user:EMAIL, group:EMAIL or "
            "serviceAccount:EMAIL (e.g. --launcher user:alice@example.com)"
        )
    return member


def default_launchers() -> list[str]:
    """The caller, when that is knowable without a network call: Application Default
    Credentials from a service account's key file (GOOGLE_APPLICATION_CREDENTIALS, type
    "service_account") name its account in "client_email", what google-auth's
    service_account_email answers. A person's credentials (gcloud's) name nobody and the
    metadata server's would need a request: then none, and setup's follow-up names
    --launcher."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    try:
        info = json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return []
    if not isinstance(info, dict) or info.get("type") != "service_account":
        return []
    email = info.get("client_email")
    if not isinstance(email, str) or "@" not in email:
        return []
    return [f"serviceAccount:{email}"]


def launchers_for(given: Sequence[str]) -> list[str]:
    """Who gets to sign as the signer: those named (each checked), else the caller if known."""
    return [check_launcher(m) for m in given] if given else default_launchers()


def token_creator_step(project: str, member: str) -> SetupStep:
    signer = signer_account_email(project)
    return SetupStep(
        f"{TOKEN_CREATOR} for {member} on {signer} only: `bench launch` as {member} signs "
        "each run's grants as that account",
        [
            *("gcloud", "iam", "service-accounts", "add-iam-policy-binding", signer),
            f"--project={project}",
            f"--member={member}",
            f"--role={TOKEN_CREATOR}",
        ],
        lambda c: grant_on_account(c.api, signer, member, TOKEN_CREATOR),
        names_account=True,
    )


def setup_steps(
    project: str,
    bucket: str,
    region: str,
    prefix: str = "",
    retention_days: int = 30,
    launchers: Sequence[str] = (),
) -> list[SetupStep]:
    email = vm_account_email(project)
    member = f"serviceAccount:{email}"
    signer = signer_account_email(project)
    signer_member = f"serviceAccount:{signer}"
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
        lifecycle_step(bucket, prefix, retention_days),
        SetupStep(
            f"service account {email} for bench VMs",
            [
                *("gcloud", "iam", "service-accounts", "create", VM_ACCOUNT_ID),
                f"--project={project}",
                "--display-name=bench VMs",
            ],
            lambda c: c.create_account(),
        ),
        SetupStep(
            f"service account {signer} that signs each run's own storage grants",
            [
                *("gcloud", "iam", "service-accounts", "create", SIGNER_ACCOUNT_ID),
                f"--project={project}",
                "--display-name=bench run grants",
            ],
            lambda c: c.create_account(SIGNER_ACCOUNT_ID, "bench run grants"),
        ),
        _role_step(project, OBJECT_WRITER_ROLE_ID, "bench run objects", OBJECT_WRITER_PERMISSIONS),
        _bucket_grant_step(bucket, signer_member, writer_role, runs_only, "bench runs only"),
        _role_step(project, CACHE_READER_ROLE_ID, "bench cache reader", CACHE_READER_PERMISSIONS),
        _bucket_grant_step(bucket, member, reader_role, cache_only, "bench cache read"),
        _role_step(
            project, SELF_DELETE_ROLE_ID, "bench VM self-delete", list(SELF_DELETE_PERMISSIONS)
        ),
        SetupStep(
            f"that role for it, on instances and disks named {INSTANCE_PREFIX}* only",
            [
                *("gcloud", "projects", "add-iam-policy-binding", project),
                f"--member={member}",
                f"--role={delete_role}",
                f"--condition=expression={delete_only},title={SELF_DELETE_TITLE}",
            ],
            lambda c: c.grant_role_with_condition(member, delete_role, delete_only),
            names_account=True,
        ),
        *(token_creator_step(project, launcher) for launcher in launchers),
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
        names_account=True,
    )


class SetupClient:
    """The calls `--apply` makes; what exists already is left as it is (or brought to what
    setup wants, for a custom role's permissions)."""

    def __init__(self, config: BenchConfig, store: GcsStore) -> None:
        self.store = store
        self.api = IamApi(config)

    def create_bucket(self, region: str) -> str:
        """The bucket, created with uniform bucket-level access. An existing one without it
        stops setup here: the conditional grants below would fail with 400 ("To use IAM
        Conditions on a bucket, you must enable uniform bucket-level access",
        https://cloud.google.com/storage/docs/access-control/iam#conditions). Enabling it is
        the owner's call (object ACLs stop applying), so setup names the command."""
        store = self.store
        if not store.bucket_exists():
            store.create_bucket(region)
            return "created"
        if store.uniform_access_enabled():
            return "exists already"
        bucket = store.bucket_name
        raise ConfigError(
            f"gs://{bucket} exists without uniform bucket-level access, which the IAM "
            "conditions setup grants need (Cloud Storage refuses them with 400): enable it "
            f"with `gcloud storage buckets update gs://{bucket} --uniform-bucket-level-access` "
            "(its object ACLs then stop applying) or set another bucket, then run setup "
            "again. Nothing after the bucket step was done"
        )

    def keep_lifecycle_rule(self, rule: dict[str, Any]) -> str:
        return "set" if self.store.keep_lifecycle_rule(rule) else "set already"

    def create_account(self, account_id: str = VM_ACCOUNT_ID, title: str = "bench VMs") -> str:
        created = self.api.create_account(account_id, title)
        return "created" if created else "exists already"

    def grant_bucket(self, member: str, role: str, condition: dict[str, str]) -> str:
        granted = self.store.grant(role, member, condition)
        return "granted" if granted else "granted already"

    def create_role(self, role_id: str, title: str, permissions: list[str]) -> str:
        role = {
            "title": title,
            "description": f"{title}: what a bench VM needs, nothing more.",
            "includedPermissions": permissions,
            "stage": "GA",
        }
        if self.api.create_role(role_id, role):
            return "created"
        # An earlier setup's role may hold other permissions (one bench version granted
        # compute.instances.delete alone): bring it to exactly these.
        held = set(self.api.role(role_id).get("includedPermissions", []))
        if held == set(permissions):
            return "exists already"
        self.api.set_role_permissions(role_id, permissions)
        return f"updated to hold only {', '.join(permissions)}"

    def grant_role_with_condition(self, member: str, role: str, condition: str) -> str:
        policy = self.api.project_policy()
        binding = {
            "role": role,
            "members": [member],
            "condition": {"title": SELF_DELETE_TITLE, "expression": condition},
        }
        bindings = policy.get("bindings", [])
        if binding in bindings:
            return "granted already"
        # An earlier setup's binding of this role (another condition) gives way to this one.
        kept = [
            b for b in bindings if not (b.get("role") == role and member in b.get("members", []))
        ]
        # Conditions need policy version 3; the etag makes a concurrent change fail (409).
        if not self.api.set_project_policy({**policy, "version": 3, "bindings": [*kept, binding]}):
            raise CloudError("the project's IAM policy changed meanwhile; run setup again")
        return "granted"


def grant_on_account(api: IamApi, email: str, member: str, role: str) -> str:
    """`member` added under `role`, with no condition, to the service account's own policy
    (read, changed, written back with its etag), so it reaches that account alone; nothing
    else in the policy changes."""
    policy = api.account_policy(email)
    bindings = [dict(b) for b in policy.get("bindings", [])]
    plain = [b for b in bindings if b.get("role") == role and "condition" not in b]
    if any(member in b.get("members", []) for b in plain):
        return "granted already"
    if plain:
        plain[0]["members"] = [*plain[0].get("members", []), member]
    else:
        bindings.append({"role": role, "members": [member]})
    if not api.set_account_policy(email, {**policy, "bindings": bindings}):
        raise CloudError(f"the IAM policy of {email} changed meanwhile; run setup again")
    return "granted"


def setup_steps_for(config: BenchConfig, launchers: list[str]) -> list[SetupStep]:
    """`launchers`: as launchers_for answered."""
    return setup_steps(
        config.project,
        config.bucket,
        region_of(config.zones[0]),
        config.prefix,
        config.runs_retention_days,
        launchers,
    )


def setup_followups(config: BenchConfig, launchers: list[str]) -> list[str]:
    signer = signer_account_email(config.project)
    # signBlob needs roles/iam.serviceAccountTokenCreator on the signer, which no basic
    # role gives (https://cloud.google.com/iam/docs/service-account-permissions).
    signing = [
        "whoever launches needs to sign as the signer account (once per person): "
        "bench setup --apply --launcher user:YOUR_EMAIL (or gcloud iam service-accounts "
        f"add-iam-policy-binding {signer} --member=user:YOUR_EMAIL --role={TOKEN_CREATOR})"
    ]
    return [
        *([] if launchers else signing),
        f'then add to bench.toml: service_account = "{vm_account_email(config.project)}"',
        "and check the project with: bench doctor",
    ]


def apply_setup(
    config: BenchConfig,
    store: GcsStore,
    steps: list[SetupStep],
    on_done: Callable[[SetupStep, str], None],
    on_wait: Callable[[SetupStep, float], None] = lambda step, delay: None,
) -> None:
    """Each step in order; `on_wait(step, seconds)` before a retry of a grant that the new
    service account is not visible to yet."""
    client = SetupClient(config, store)
    for step in steps:
        on_done(step, apply_step(step, client, on_wait))


def apply_step(step: SetupStep, client: Any, on_wait) -> str:
    """One step on `client` (what its `apply` calls): an IAM refusal names the roles setup
    needs; a grant to an account Google cannot see yet is retried with backoff."""
    delays = list(PROPAGATION_DELAYS_S) if step.names_account else []
    while True:
        try:
            return step.apply(client)
        except IamRefused as e:
            raise PermissionDeniedError(
                f"{e}; setup needs a project Owner (or roles/iam.serviceAccountAdmin, "
                "roles/iam.roleAdmin, roles/resourcemanager.projectIamAdmin and "
                "roles/storage.admin)"
            ) from e
        except BenchError as e:
            if not _account_not_visible_yet(e):
                raise
            if not delays:
                waited = sum(PROPAGATION_DELAYS_S)
                raise CloudError(
                    f"{e} (still, after {waited:.0f} s of retries): Google says a new service "
                    "account may take 60 s or more to become usable; run `bench setup --apply` "
                    "again in a minute (it is safe to repeat)"
                ) from e
            delay = delays.pop(0)
            on_wait(step, delay)
            time.sleep(delay)


def _account_not_visible_yet(error: BenchError) -> bool:
    """How a grant to an account Google cannot see yet fails: 400 INVALID_ARGUMENT "Service
    account ... does not exist." (Resource Manager); Cloud Storage's setIamPolicy answers
    400 too, naming the member or saying "Invalid argument"."""
    text = str(error).lower()
    return ("does not exist" in text and "service account" in text) or "invalid argument" in text
