"""`bench doctor` on gce: is this project ready for a launch? Asks Compute, Storage and IAM,
then judges with the pure builders of readiness.py and iam_readiness.py: one line per
check, ✓ or ✗ with its fix."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import Check, not_run
from orchestrator.backends.gce.adaptor import api_exceptions
from orchestrator.backends.gce.project_resources import ProjectResources
from orchestrator.backends.gce.readiness import (
    GpuShape,
    bucket_check,
    compute_api_check,
    credentials_check,
    global_quota_check,
    image_check,
    project_check,
    quotas_of,
    region_quota_check,
    shapes_for,
    vm_access_check,
    zone_check,
)
from orchestrator.backends.gce.signing import signer_email
from orchestrator.config import region_of, regions_of
from orchestrator.errors import BenchError, UsageError
from orchestrator.gpus import load_gpu_catalog, member_config

if TYPE_CHECKING:
    from orchestrator.backends.gce.compute import ComputeApi
    from orchestrator.config import BenchConfig
    from orchestrator.stores.gcs import GcsStore


# What run_checks asks, in its order: the lines `bench doctor` lists as "not run" where a
# failed check (or a missing setting) leaves the rest unasked.
CHECKLIST = (
    "credentials",
    "project",
    "Compute API",
    "zones (machine and GPU types)",
    "image family",
    "GPU quota",
    "bucket",
    "VM bucket access",
    "permissions (create VMs, act as the VM account, VM self-delete)",
    "org policies",
)


GCLOUD_INSTALL = "cloud.google.com/sdk/docs/install"


def preflight_checks(config: BenchConfig) -> list[Check]:
    """What this machine and the settings must hold before the project can be asked:
    a project and a bucket, and (advice: credentials may come without it) gcloud, which
    logs the credentials in and runs `bench setup`'s commands."""
    gcloud = shutil.which("gcloud")
    return [
        Check(
            "gcloud installed",
            gcloud is not None,
            gcloud or "no gcloud on PATH",
            f"install the Google Cloud CLI ({GCLOUD_INSTALL}): credentials come from "
            "`gcloud auth application-default login`, and `bench setup` prints gcloud commands",
            required=False,  # a key file or CI's workload identity needs none
        ),
        Check(
            "project set",
            bool(config.project),
            config.project or "no project in bench.toml, BENCH_PROJECT or --project",
            'set project = "my-project" in bench.toml (README: "Pointing bench at a GCP project")',
        ),
        Check(
            "bucket set",
            bool(config.bucket),
            f"gs://{config.bucket}" if config.bucket else "no bucket in bench.toml or BENCH_BUCKET",
            'set bucket = "my-bench-results" in bench.toml; `bench setup` creates it',
        ),
    ]


def _after(name: str) -> tuple[str, ...]:
    return CHECKLIST[CHECKLIST.index(name) + 1 :]


def run_checks(
    config: BenchConfig,
    api: ComputeApi,
    store: GcsStore,
    gpu_keys: list[str] | None,
    probe: bool,
    poll_seconds: float,
) -> Iterator[Check]:
    """Every check, in order; stops after a failed credentials, project or Compute API
    check: nothing else can be asked then. `gpu_keys` (launch --gpu): each GPU type's
    shape in its own zones, and quota for all of them at once. `probe`: then a tiny VM
    proves the VM account's object access and self-delete (probe_run.py), unless the
    checks it depends on failed, watching it every `poll_seconds`."""
    resources = ProjectResources(api)
    info, first = _first_contact(resources)
    yield first[0]
    if not first[0].ok:
        yield from not_run(_after("credentials"), "credentials")
        return
    yield from first[1:]
    if not all(c.ok for c in first):
        failed = next(c.name for c in first if not c.ok)
        yield from not_run(_after(CHECKLIST[len(first) - 1]), f"the {failed} check")
        return
    placed = _shapes_by_zone(config, gpu_keys)
    shapes = list(dict.fromkeys(s for zone_shapes in placed.values() for s in zone_shapes))
    for zone, zone_shapes in placed.items():
        yield _zone(resources, zone, zone_shapes)
    yield image_check(
        config.image_project,
        config.image_family,
        *resources.image_state(config.image_project, config.image_family),
    )
    for region in regions_of(list(placed)):
        quotas = quotas_of(resources.region(region))
        in_region = [s for z, zs in placed.items() if region_of(z) == region for s in zs]
        yield region_quota_check(
            region,
            quotas,
            list(dict.fromkeys(in_region)),
            config.spot,
            not config.spot or config.on_demand_fallback,
        )
    yield global_quota_check(quotas_of(info), shapes)
    storage = [_bucket(config, store)]
    yield storage[0]
    if storage[0].ok:
        storage.append(_vm_access(config, store, info))
        yield storage[1]
    iam = list(_iam_checks(config, info))
    yield from iam
    yield _org_policies(config)
    if probe:
        yield from _probe(config, api, store, [*storage, *iam], poll_seconds)


def _shapes_by_zone(config, gpu_keys: list[str] | None) -> dict[str, list[GpuShape]]:
    """Zone -> the shapes to check there: the configured one in the configured zones, or
    each requested GPU type's shape in its own zones (gpus.member_config)."""
    if not gpu_keys:
        return {zone: shapes_for(config) for zone in config.zones}
    catalog = load_gpu_catalog()
    placed: dict[str, list[GpuShape]] = {}
    for key in gpu_keys:
        if key not in catalog:
            raise UsageError(f"--gpu {key} names this machine's GPU; doctor checks gce")
        member = member_config(config, catalog[key])
        for zone in member.zones:
            placed.setdefault(zone, []).extend(shapes_for(member))
    return placed


def _first_contact(resources) -> tuple[dict | None, list[Check]]:
    """projects.get answers three questions: credentials, project, Compute API."""
    project = resources.project
    try:
        info = resources.project_info()
    except BenchError as e:
        cause = e.__cause__
        if isinstance(cause, api_exceptions.Unauthorized) or "credentials" in str(e):
            return None, [credentials_check(str(e))]
        if isinstance(cause, api_exceptions.Forbidden) and (
            "SERVICE_DISABLED" in str(cause.errors) or "accessNotConfigured" in str(cause.errors)
        ):
            return None, [
                credentials_check(None),
                project_check(project, {}),
                compute_api_check(project, True),
            ]
        if isinstance(cause, api_exceptions.Forbidden):
            return None, [credentials_check(None), project_check(project, None)]
        raise
    return info, [
        credentials_check(None),
        project_check(project, info),
        compute_api_check(project, False),
    ]


def _zone(resources, zone: str, shapes: list[GpuShape]) -> Check:
    if resources.zone(zone) is None:
        return zone_check(zone, False, [])
    missing = []
    for shape in shapes:
        if resources.machine_type(zone, shape.machine_type) is None:
            missing.append(shape.machine_type)
        if resources.accelerator_type(zone, shape.accelerator_type) is None:
            missing.append(shape.accelerator_type)
    return zone_check(zone, True, missing)


def _bucket(config: BenchConfig, store: GcsStore) -> Check:
    key = f"doctor/{uuid.uuid4().hex}.txt"
    probe = f"bench doctor {time.time()}".encode()
    try:
        store.put_bytes(key, probe)
        read_back = store.get_bytes(key)
        store.delete(key)
    except BenchError as e:
        return bucket_check(config.bucket, str(e))
    if read_back != probe:
        return bucket_check(config.bucket, "an object read back differs from what was written")
    return bucket_check(config.bucket, None)


def _vm_account(config: BenchConfig, info: dict[str, Any] | None) -> str:
    account = config.service_account
    if account == "default":
        # projects.get names it (`defaultServiceAccount`); its `id` is no project number
        # (https://cloud.google.com/compute/docs/reference/rest/v1/projects).
        account = (info or {}).get("defaultServiceAccount") or "the default compute account"
    return account


def _iam_checks(config: BenchConfig, info: dict[str, Any] | None) -> Iterator[Check]:
    """May this caller create VMs and start them as the VM account (testIamPermissions, as
    Google documents it: https://cloud.google.com/iam/docs/testing-permissions), and may the
    VM account delete its own VM (the binding `bench setup` makes)?"""
    from orchestrator.backends.gce.iam import SELF_DELETE_ROLE_ID
    from orchestrator.backends.gce.iam_api import IamApi
    from orchestrator.backends.gce.iam_readiness import (
        ACT_AS_PERMISSION,
        CREATE_PERMISSION,
        act_as_check,
        create_check,
        default_account_check,
        self_delete_check,
    )

    api, project = IamApi(config), config.project
    account = _vm_account(config, info)
    yield ask_iam(
        "create VMs", lambda: create_check(project, api.project_permissions([CREATE_PERMISSION]))
    )
    yield ask_iam(
        "act as the VM account",
        lambda: act_as_check(account, api.account_permissions(account, [ACT_AS_PERMISSION])),
    )
    if config.service_account == "default":
        yield default_account_check(config.allow_leftover_disk)
        return
    yield ask_iam(
        "VM self-delete",
        lambda: self_delete_check(
            project, account, api.project_policy(), api.role(SELF_DELETE_ROLE_ID)
        ),
    )


def _org_policies(config: BenchConfig) -> Check:
    """Each constraint's effective policy that can be read, and why each other could not."""
    from orchestrator.backends.gce.iam_api import IamApi
    from orchestrator.backends.gce.org_policies import CONSTRAINTS, org_policy_check

    api = IamApi(config)
    read: dict[str, Any] = {}
    for constraint in CONSTRAINTS:
        try:
            read[constraint] = api.effective_org_policy(constraint)
        except BenchError as e:
            read[constraint] = str(e).split(": ", 1)[-1] or type(e).__name__
    return org_policy_check(config.project, read, config)


def ask_iam(name: str, check: Callable[[], Check]) -> Check:
    """The check, or a ✗ saying IAM could not be asked (the Batch doctor's too)."""
    try:
        return check()
    except BenchError as e:
        return Check(
            name,
            False,
            f"cannot ask IAM ({e})",
            "you need resourcemanager.projects.getIamPolicy and iam.roles.get (e.g. "
            "roles/iam.securityReviewer) to check this; the IAM and Resource Manager APIs "
            "must be enabled",
        )


def _probe(
    config: BenchConfig, api: ComputeApi, store: GcsStore, needed: list[Check], poll: float
) -> Iterator[Check]:
    from orchestrator.backends.gce.probe_run import run_probe

    failed = [c.name for c in needed if not c.ok]
    if config.service_account == "default":
        failed.append("a VM account that may delete itself (service_account)")
    if failed:
        yield Check(
            "probe",
            False,
            f"not started: it needs {', '.join(failed)}",
            "fix those ✗ lines, then run `bench doctor --probe` again",
        )
        return
    yield from run_probe(config, api, store, poll)


def _vm_access(config: BenchConfig, store: GcsStore, info: dict[str, Any] | None) -> Check:
    account = _vm_account(config, info)
    try:
        roles = store.role_members()
    except BenchError as e:
        return Check(
            "VM bucket access",
            False,
            f"cannot read the bucket's IAM policy ({e})",
            "you need storage.buckets.getIamPolicy on the bucket to check this",
        )
    return vm_access_check(config.bucket, account, signer_email(config), roles)
