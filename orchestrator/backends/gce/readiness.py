"""Is a project ready for a launch? Pure check builders: one `Check` per question, each
with the fix, built from what Compute and Storage answered (`bench doctor` and launch's
cheap checks make the calls), so every verdict and its wording is unit-tested offline.

GPU checks take a list of `GpuShape`s: the configured machine, or each GPU type of a
sweep (`doctor --gpu`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends.base import Check
from orchestrator.backends.gce.iam import OBJECT_WRITER_ROLE_ID

# Roles that let the VM read its payload and write results (predefined Cloud Storage roles:
# https://cloud.google.com/storage/docs/access-control/iam-roles).
# Predefined roles that reach objects across a bucket
# (https://cloud.google.com/storage/docs/access-control/iam-roles).
OBJECT_ROLES = (
    "roles/storage.objectViewer",
    "roles/storage.objectCreator",
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.admin",
)
GLOBAL_GPU_QUOTA = "GPUS_ALL_REGIONS"
QUOTA_PAGE = "https://console.cloud.google.com/iam-admin/quotas"


@dataclass(frozen=True)
class GpuShape:
    """One machine shape to check: a machine type carrying `count` accelerators."""

    machine_type: str
    accelerator_type: str
    count: int

    @property
    def quota_metric(self) -> str:
        """The regional quota metric of this GPU (on-demand; PREEMPTIBLE_ for spot)."""
        model = self.accelerator_type.removeprefix("nvidia-").removeprefix("tesla-")
        model = model.split("-")[0].upper()
        return f"NVIDIA_{model}_GPUS"


def shapes_for(config) -> list[GpuShape]:
    return [GpuShape(config.machine_type, config.accelerator_type, config.accelerator_count)]


# -- pure check builders -------------------------------------------------------------------


CREDENTIALS_FIX = "run `gcloud auth application-default login`"


def credentials_check(problem: str | None) -> Check:
    if problem:
        # The error names the fix too: the line says it once.
        return Check(
            "credentials", False, problem.split(f"; {CREDENTIALS_FIX}")[0], CREDENTIALS_FIX
        )
    return Check("credentials", True, "Google credentials accepted")


def project_check(project: str, info: dict | None) -> Check:
    if info is None:
        return Check(
            "project",
            False,
            f"project {project} not found or not visible to these credentials",
            "set `project` in bench.toml to a project id you can use",
        )
    return Check("project", True, project)


def compute_api_check(project: str, disabled: bool) -> Check:
    if disabled:
        return Check(
            "Compute API",
            False,
            f"the Compute Engine API is disabled in {project}",
            f"gcloud services enable compute.googleapis.com --project {project}",
        )
    return Check("Compute API", True, "enabled")


def zone_check(zone: str, exists: bool, missing: list[str]) -> Check:
    """`missing`: machine or accelerator types of the wanted shapes the zone lacks."""
    name = f"zone {zone}"
    if not exists:
        return Check(name, False, "no such zone", f"remove {zone} from `zones`")
    if missing:
        return Check(
            name,
            False,
            f"does not offer {', '.join(missing)}",
            f"remove {zone} from `zones` (see https://cloud.google.com/compute/docs/gpus/"
            "gpu-regions-zones for zones that do)",
        )
    return Check(name, True, "offers the machine type and the GPU")


def image_check(
    image_project: str, family: str, resolved: dict | None, family_images: list[dict]
) -> Check:
    """`resolved`: images.getFromFamily's answer (None: no usable image); `family_images`:
    every image of the family, to name the successor of a deprecated one."""
    name = f"image family {family}"
    deprecated = (resolved or {}).get("deprecated") or {}
    if resolved is not None and deprecated.get("state", "ACTIVE") == "ACTIVE":
        return Check(name, True, f"resolves to {resolved.get('name')}")
    states = [i.get("deprecated") or {} for i in ([resolved] if resolved else family_images)]
    if not any(states):
        return Check(
            name,
            False,
            f"no image in family {family} of project {image_project}",
            "set `image_family`/`image_project` to a family that exists",
        )
    latest = states[-1]
    successor = _last_segment(latest.get("replacement", "")) or "(none named)"
    return Check(
        name,
        False,
        f"deprecated ({latest.get('state', 'DEPRECATED')}); its successor is {successor}",
        f"set image_family = {successor!r} in bench.toml"
        if latest.get("replacement")
        else "choose a supported family from https://cloud.google.com/deep-learning-vm/docs/images",
    )


def region_quota_check(
    region: str,
    quotas: dict[str, float] | None,
    shapes: list[GpuShape],
    spot: bool,
    on_demand: bool,
) -> Check:
    """Spot VMs use the PREEMPTIBLE_ quota when granted, else the on-demand one
    (https://cloud.google.com/compute/resource-usage#gpu_quota). `quotas` are what is free
    now; None (Compute could not load them) is unknown and refuses nothing."""
    name = f"GPU quota {region}"
    if quotas is None:
        return Check(name, True, "unknown: Compute could not load this region's quotas now")
    found, short = [], []
    for shape in shapes:
        metric = shape.quota_metric
        standard = quotas.get(metric, 0.0)
        preemptible = quotas.get(f"PREEMPTIBLE_{metric}", 0.0)
        found.append(f"{metric} {standard:g} free, PREEMPTIBLE_{metric} {preemptible:g} free")
        if spot and max(standard, preemptible) < shape.count:
            short.append(f"PREEMPTIBLE_{metric}")
        if on_demand and standard < shape.count:
            short.append(metric)
    if short:
        return Check(
            name,
            False,
            "; ".join(found),
            f"request {' and '.join(short)} ≥ {shapes[0].count} in {region} at {QUOTA_PAGE}",
        )
    return Check(name, True, "; ".join(found))


def global_quota_check(quotas: dict[str, float] | None, shapes: list[GpuShape]) -> Check:
    if quotas is None:
        return Check(GLOBAL_GPU_QUOTA, True, "unknown: Compute could not load the quotas now")
    limit = quotas.get(GLOBAL_GPU_QUOTA, 0.0)
    needed = sum(shape.count for shape in shapes)  # a sweep runs them all at once
    if limit < needed:
        return Check(
            GLOBAL_GPU_QUOTA,
            False,
            f"{limit:g} free (new projects start at 0: no GPU anywhere)",
            f"request {GLOBAL_GPU_QUOTA} ≥ {needed} at {QUOTA_PAGE}",
        )
    return Check(GLOBAL_GPU_QUOTA, True, f"{limit:g} free")


def bucket_check(bucket: str, problem: str | None) -> Check:
    name = f"bucket gs://{bucket}"
    if problem:
        return Check(name, False, problem, "run `bench setup` (or fix the bucket's access)")
    return Check(name, True, "exists; this machine wrote, read and deleted an object")


def vm_access_check(bucket: str, account: str, signer: str, roles: dict[str, set[str]]) -> Check:
    """Contained: the VM account holds no role on the run objects (every name is public, so
    any such role reaches every run) and the signer of each run's grants holds bench setup's
    role on runs/ (backends/gce/signing.py)."""
    member, signer_member = f"serviceAccount:{account}", f"serviceAccount:{signer}"
    name = "VM bucket access"
    writer = [r for r in roles if r.endswith(f"/roles/{OBJECT_WRITER_ROLE_ID}")]
    held = [r for r in [*writer, *OBJECT_ROLES] if member in roles.get(r, set())]
    if held:
        return Check(
            name,
            False,
            f"{account} holds {held[0]} on gs://{bucket}: every run's name is public, so code "
            "on any run's VM could read and overwrite every other run's objects",
            f"remove that binding (gcloud storage buckets remove-iam-policy-binding gs://{bucket} "
            f"--member={member} --role={held[0]} --all), then run `bench setup --apply`",
        )
    if not any(signer_member in roles[r] for r in writer):
        return Check(
            name,
            False,
            f"{signer} holds no {OBJECT_WRITER_ROLE_ID} role on gs://{bucket}: launch could not "
            "grant a run its own objects",
            "run `bench setup --apply`",
        )
    return Check(
        name,
        True,
        f"{account} holds no role on the run objects; each run reaches only its own, through "
        f"what {signer} signs for it",
    )


def quotas_of(resource: dict | None) -> dict[str, float] | None:
    """What is free now of each quota metric (limit less usage), or None when Compute could
    not load the quotas (`quotaStatusWarning`: unknown, never 0)
    (https://cloud.google.com/compute/docs/reference/rest/v1/regions)."""
    if resource and resource.get("quotaStatusWarning") and not resource.get("quotas"):
        return None
    return {
        q["metric"]: float(q.get("limit", 0.0)) - float(q.get("usage", 0.0))
        for q in (resource or {}).get("quotas", [])
    }


def _last_segment(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]
