"""What instances.insert refuses before any VM exists, each rule as Google documents it.

`check_insert` raises the error the API answers (400 INVALID_FIELD_VALUE, or 404 for an
image that does not exist); `gpus_of` and `quota_failure` tell which GPU quota a VM takes
and whether the project has it. Quota is checked after the request is accepted: like a
stockout, it comes back as the failed insert operation's error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import gce_errors
from .compute_catalog import GLOBAL_GPU_QUOTA, MACHINE_SHAPES, QUOTA_METRIC, FakeCatalog, region_of
from .gce_errors import GceError

# "Each metadata value has a maximum limit of 256 KB"; "a combined total limit of 512 KB for
# all metadata entries"; keys at most 128 bytes
# (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations; the
# compute v1 discovery document's Metadata.items.value says 262144 bytes too).
METADATA_VALUE_MAX_BYTES = 256 * 1024
METADATA_TOTAL_MAX_BYTES = 512 * 1024
METADATA_KEY_MAX_BYTES = 128
# "The minimum time limit is 30 seconds and the maximum time limit is 120 days"
# (https://cloud.google.com/compute/docs/instances/limit-vm-runtime#limitations).
MIN_RUN_SECONDS = 30
MAX_RUN_SECONDS = 120 * 24 * 3600
# AttachedDiskInitializeParams.diskSizeGb: "at least 10 GB"; with a sourceImage, at least the
# image (compute v1 discovery document).
MIN_DISK_GB = 10
# N1 types take 1, 2 or 4 T4s (https://cloud.google.com/compute/docs/gpus#t4-gpus).
N1_T4_COUNTS = (1, 2, 4)
_IMAGE = re.compile(r"(?:^|/)projects/(?P<project>[^/]+)/global/images/(?P<rest>.+)$")


def check_insert(catalog: FakeCatalog, project: str, zone: str, body: Mapping[str, Any]) -> None:
    _check_metadata(body)
    gpus = _check_accelerators(catalog, project, zone, body)
    _check_scheduling(body, gpus)
    _check_boot_disk(catalog, project, body)


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _check_metadata(body: Mapping[str, Any]) -> None:
    total = 0
    for item in (body.get("metadata") or {}).get("items") or []:
        key, value = item.get("key", ""), item.get("value") or ""
        size = len(value.encode())
        if len(key.encode()) > METADATA_KEY_MAX_BYTES or size > METADATA_VALUE_MAX_BYTES:
            raise gce_errors.invalid(
                f"Invalid value for field 'resource.metadata': metadata entry '{key[:40]}' "
                f"is {size} bytes; a value may hold at most {METADATA_VALUE_MAX_BYTES} bytes."
            )
        total += len(key.encode()) + size
    if total > METADATA_TOTAL_MAX_BYTES:
        raise gce_errors.invalid(
            f"Invalid value for field 'resource.metadata': {total} bytes in all; metadata "
            f"may hold at most {METADATA_TOTAL_MAX_BYTES} bytes."
        )


def gpus_of(body: Mapping[str, Any]) -> tuple[str, int] | None:
    """(accelerator type, count) the VM carries: attached, or built into its machine type."""
    attached = body.get("guestAccelerators") or []
    if attached:
        return _last(attached[0].get("acceleratorType", "")), sum(
            int(a.get("acceleratorCount") or 0) for a in attached
        )
    shape = MACHINE_SHAPES.get(_last(body.get("machineType") or ""))
    if shape is not None and shape.accelerator:
        return shape.accelerator, shape.accelerator_count
    return None


def _check_accelerators(
    catalog: FakeCatalog, project: str, zone: str, body: Mapping[str, Any]
) -> tuple[str, int] | None:
    machine_type = _last(body.get("machineType") or "")
    try:
        catalog.machine_type(project, zone, machine_type)
    except GceError:  # a type the zone lacks is a bad field of the request, not a 404
        raise gce_errors.machine_type_missing(zone, machine_type) from None
    shape = MACHINE_SHAPES[machine_type]
    attached = body.get("guestAccelerators") or []
    gpus = gpus_of(body)
    field = "'resource.guestAccelerators[0].acceleratorCount'"
    if shape.accelerator:
        # Accelerator-optimized types come with their GPUs: a request may name them, but only
        # as the type carries them (g2-standard-4: one L4;
        # https://cloud.google.com/compute/docs/accelerator-optimized-machines#g2-vms).
        if attached and gpus != (shape.accelerator, shape.accelerator_count):
            raise gce_errors.invalid(
                f"Invalid value for field {field}: '{gpus[1] if gpus else 0}'. Machine type "
                f"{machine_type} comes with {shape.accelerator_count} {shape.accelerator}."
            )
        return gpus
    if not attached:
        return None
    accelerator, count = gpus or ("", 0)
    if not machine_type.startswith("n1-") or accelerator != "nvidia-tesla-t4":
        raise gce_errors.invalid(
            f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': "
            f"'{accelerator}'. Machine type {machine_type} does not take this accelerator "
            "(https://cloud.google.com/compute/docs/gpus)."
        )
    if not catalog.offers(zone, accelerator):
        raise gce_errors.invalid(
            f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': "
            f"'{accelerator}'. Accelerator type {accelerator} does not exist in zone {zone}."
        )
    if count not in N1_T4_COUNTS:
        raise gce_errors.invalid(f"Invalid value for field {field}: '{count}'.")
    return gpus


def _check_scheduling(body: Mapping[str, Any], gpus: tuple[str, int] | None) -> None:
    scheduling = body.get("scheduling") or {}
    spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
    duration = scheduling.get("maxRunDuration")
    if duration is not None:
        seconds = int(duration.get("seconds") or 0)
        if not MIN_RUN_SECONDS <= seconds <= MAX_RUN_SECONDS:
            raise gce_errors.invalid(
                f"Invalid value for field 'resource.scheduling.maxRunDuration.seconds': "
                f"'{seconds}'. Must be from {MIN_RUN_SECONDS} to {MAX_RUN_SECONDS}."
            )
    # Spot VMs default to, and allow only, TERMINATE (Scheduling.onHostMaintenance in the
    # discovery document); GPU VMs cannot live-migrate, so they need it set
    # (https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance).
    maintenance = scheduling.get("onHostMaintenance") or ("TERMINATE" if spot else "MIGRATE")
    if maintenance != "TERMINATE" and (spot or gpus):
        why = "Spot VMs" if spot else "Instances with guest accelerators"
        raise gce_errors.invalid(
            f"Invalid value for field 'resource.scheduling.onHostMaintenance': "
            f"'{maintenance}'. {why} do not support live migration."
        )
    # Spot VMs are not restarted automatically
    # (https://cloud.google.com/compute/docs/instances/create-use-spot).
    if spot and scheduling.get("automaticRestart") is True:
        raise gce_errors.invalid(
            "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. "
            "Spot VMs cannot be restarted automatically."
        )


def _check_boot_disk(catalog: FakeCatalog, project: str, body: Mapping[str, Any]) -> None:
    """The compute v1 discovery document (google-api-python-client's compute.v1.json,
    AttachedDiskInitializeParams.diskSizeGb): "at least 10 GB"; with a sourceImage "the
    default size is the size of the sourceImage". That a smaller size than the image's is
    refused, with this message, is Compute's answer as users report it; no Google page we
    could read states it, so this is the one rule here without a documentation URL."""
    for index, disk in enumerate(body.get("disks") or []):
        params = disk.get("initializeParams") or {}
        source = params.get("sourceImage")
        if not source:
            continue
        image = _resolve_image(catalog, project, source)
        image_gb = int(image.get("diskSizeGb") or 0)
        size = params.get("diskSizeGb")
        if size is not None and int(size) < max(MIN_DISK_GB, image_gb):
            raise gce_errors.invalid(
                f"Invalid value for field 'resource.disks[{index}].initializeParams."
                f"diskSizeGb': '{size}'. Requested disk size cannot be smaller than the "
                f"image size ({image_gb} GB)."
            )


def _resolve_image(catalog: FakeCatalog, project: str, source: str) -> dict[str, Any]:
    """The image a sourceImage names (a family resolves to its newest usable image)."""
    match = _IMAGE.search(source)
    image_project, rest = (match["project"], match["rest"]) if match else (project, source)
    rest = rest.removeprefix("global/images/")
    if rest.startswith("family/"):
        return catalog.image_from_family(image_project, rest.removeprefix("family/"))
    return catalog.image(image_project, rest)


def gpu_quota_metric(catalog: FakeCatalog, zone: str, accelerator: str, spot: bool) -> str:
    """Spot VMs count against the PREEMPTIBLE_ quota where the region has one, else the
    standard one (https://cloud.google.com/compute/resource-usage#gpu_quota)."""
    metric = QUOTA_METRIC[accelerator]
    preemptible = f"PREEMPTIBLE_{metric}"
    if spot and catalog.region_limits(region_of(zone)).get(preemptible, 0.0) > 0:
        return preemptible
    return metric


def quota_failure(
    catalog: FakeCatalog,
    zone: str,
    body: Mapping[str, Any],
    region_use: Mapping[str, float],
    project_use: Mapping[str, float],
) -> GceError | None:
    """The quota this VM would exceed, given what the project's VMs hold now."""
    gpus = gpus_of(body)
    if gpus is None:
        return None
    accelerator, count = gpus
    scheduling = body.get("scheduling") or {}
    spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
    metric = gpu_quota_metric(catalog, zone, accelerator, spot)
    region = region_of(zone)
    limit = catalog.region_limits(region).get(metric, 0.0)
    if region_use.get(metric, 0.0) + count > limit:
        return gce_errors.quota_exceeded(metric, region, limit)
    limit = catalog.project_quotas.get(GLOBAL_GPU_QUOTA, 0.0)
    if project_use.get(GLOBAL_GPU_QUOTA, 0.0) + count > limit:
        return gce_errors.quota_exceeded(GLOBAL_GPU_QUOTA, None, limit)
    return None
