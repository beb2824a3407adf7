"""Read-only resources of the compute stand-in: zones, regions with their quotas, the
project's quotas, machine and accelerator types, images and image families.

Each answer is shaped as the compute v1 discovery document says (the server validates
it). Defaults describe a new project: every configured zone offers the g2 types and the L4
(and the T4, A100 and H100 with their machine types, and e2-micro), each public image
family of PUBLIC_FAMILIES resolves to an ACTIVE image (others are 404), and every GPU quota
is 0, GPUS_ALL_REGIONS included, as Google
gives a new project (https://cloud.google.com/compute/resource-usage#gpu_quota): a test that
starts GPU VMs raises them first (`raise_gpu_quotas()`, what an approved request gives).
Tests break one thing at a time through the `FakeCatalog` attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import gce_errors
from .operations import API_ROOT, rfc3339_now

# g2 machine types carry the L4 and exist only where the L4 does:
# https://cloud.google.com/compute/docs/gpus/gpu-regions-zones
G2_TYPES = ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16")
L4 = "nvidia-l4"


@dataclass(frozen=True)
class MachineShape:
    cpus: int
    memory_mb: int
    accelerator: str | None  # built in (accelerator-optimized types) or None (N1: attached)
    accelerator_count: int = 0


# Machine types of the other GPUs bench starts, as the GPU machine-types page lists them
# (https://cloud.google.com/compute/docs/gpus): A100 40GB comes built into a2-highgpu-1g
# (12 vCPUs, 85 GB), H100 80GB into a3-highgpu-1g (26 vCPUs, 234 GB); the T4 is attached
# to an N1 type such as n1-standard-4 (4 vCPUs, 15 GB).
MACHINE_SHAPES = {
    **{
        name: MachineShape(int(name.rsplit("-", 1)[1]), int(name.rsplit("-", 1)[1]) * 4096, L4, 1)
        for name in G2_TYPES
    },
    "n1-standard-4": MachineShape(4, 15 * 1024, None),
    # The cheapest shape, shared-core, no GPU (https://cloud.google.com/compute/docs/
    # general-purpose-machines#e2-shared-core): what `bench doctor --probe` starts.
    "e2-micro": MachineShape(2, 1024, None),
    "a2-highgpu-1g": MachineShape(12, 85 * 1024, "nvidia-tesla-a100", 1),
    "a3-highgpu-1g": MachineShape(26, 234 * 1024, "nvidia-h100-80gb", 1),
}
ACCELERATORS = {
    L4: "NVIDIA L4",
    "nvidia-tesla-t4": "NVIDIA T4",
    "nvidia-tesla-a100": "NVIDIA A100 40GB",
    "nvidia-h100-80gb": "NVIDIA H100 80GB",
}
# Regional GPU quota metrics, on-demand and PREEMPTIBLE_ (spot), per GPU model:
# https://cloud.google.com/compute/resource-usage#gpu_quota. The compute v1 discovery
# document's Quota.metric enum has PREEMPTIBLE_NVIDIA_H100_GPUS but no NVIDIA_H100_GPUS:
# the H100 has a spot quota only here.
GPU_QUOTAS = (
    "NVIDIA_L4_GPUS",
    "PREEMPTIBLE_NVIDIA_L4_GPUS",
    "NVIDIA_T4_GPUS",
    "PREEMPTIBLE_NVIDIA_T4_GPUS",
    "NVIDIA_A100_GPUS",
    "PREEMPTIBLE_NVIDIA_A100_GPUS",
    "PREEMPTIBLE_NVIDIA_H100_GPUS",
)
GLOBAL_GPU_QUOTA = "GPUS_ALL_REGIONS"
# The regional quota metric each accelerator counts against (spot: its PREEMPTIBLE_ twin).
QUOTA_METRIC = {
    L4: "NVIDIA_L4_GPUS",
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
}
# Boot image sizes (images.get `diskSizeGb`): a disk is at least its image
# (AttachedDiskInitializeParams.diskSizeGb in the compute v1 discovery document).
IMAGE_SIZE_GB = {"debian-cloud": 10}
DEFAULT_IMAGE_SIZE_GB = 50
_DEFAULT_IMAGE_SUFFIX = "-v20261101"  # a public family's image unless a test sets `images`
# Public image families that exist (https://cloud.google.com/deep-learning-vm/docs/images,
# https://cloud.google.com/compute/docs/images/os-details); any other answers 404.
PUBLIC_FAMILIES = {
    "deeplearning-platform-release": {
        "pytorch-2-9-cu129-ubuntu-2204-nvidia-580",
        "common-cu129-ubuntu-2204-nvidia-580",
        "common-cu129-ubuntu-2404-nvidia-580",
        "common-cu128-ubuntu-2204-nvidia-570",
    },
    "debian-cloud": {"debian-12"},
}


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


@dataclass
class FakeImage:
    name: str
    family: str
    state: str = "ACTIVE"  # DeprecationStatus.state: ACTIVE, DEPRECATED, OBSOLETE, DELETED
    replacement: str | None = None  # an image or family URL, set with DEPRECATED


@dataclass
class FakeCatalog:
    """What the project offers. Quota limits are GPU counts."""

    zones: tuple[str, ...]
    zones_without_l4: set[str] = field(default_factory=set)
    # Zones lacking one GPU model (and the machine types that carry it built in).
    zones_without: dict[str, set[str]] = field(default_factory=dict)  # accelerator -> zones
    region_quotas: dict[str, dict[str, float]] = field(default_factory=dict)
    project_quotas: dict[str, float] = field(default_factory=lambda: {GLOBAL_GPU_QUOTA: 0.0})
    # What is in use now, per region and metric (GPUs other VMs of the project hold).
    region_usage: dict[str, dict[str, float]] = field(default_factory=dict)
    # Regions whose quotas Compute failed to load: no `quotas`, a `quotaStatusWarning`.
    quota_warning_regions: set[str] = field(default_factory=set)
    images: dict[str, list[FakeImage]] = field(default_factory=dict)  # "project/family" -> images
    compute_api_enabled: bool = True
    credentials_valid: bool = True

    def set_region_quota(self, region: str, metric: str, limit: float) -> None:
        self.region_quotas.setdefault(region, {})[metric] = limit

    def raise_gpu_quotas(self, limit: float = 8.0) -> None:
        """Every GPU quota of every region, and GPUS_ALL_REGIONS, at `limit`: the project
        of a user whose quota increase requests were approved."""
        for region in {region_of(zone) for zone in self.zones}:
            for metric in GPU_QUOTAS:
                self.set_region_quota(region, metric, limit)
        self.project_quotas[GLOBAL_GPU_QUOTA] = limit

    def region_limits(self, region: str) -> dict[str, float]:
        limits = {"CPUS": 24.0}
        limits.update(dict.fromkeys(GPU_QUOTAS, 0.0))
        limits.update(self.region_quotas.get(region, {}))
        return limits

    def deprecate_family(self, project: str, family: str, successor_family: str) -> None:
        """Every image of `family` DEPRECATED, pointing at the successor family."""
        replacement = f"{API_ROOT}/projects/{project}/global/images/family/{successor_family}"
        self.images[f"{project}/{family}"] = [
            FakeImage(f"{family}-v20260401", family, "DEPRECATED", replacement)
        ]

    # -- lookups (raise GceError as the API answers) -------------------------------------

    def _zone(self, project: str, zone: str) -> None:
        if zone not in self.zones:
            raise gce_errors.not_found(f"projects/{project}/zones/{zone}")

    def zone(self, project: str, zone: str) -> dict[str, Any]:
        self._zone(project, zone)
        return {
            "kind": "compute#zone",
            "id": str(2000 + self.zones.index(zone)),
            "creationTimestamp": rfc3339_now(),
            "name": zone,
            "description": zone,
            "status": "UP",
            "region": f"{API_ROOT}/projects/{project}/regions/{region_of(zone)}",
            "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}",
        }

    def offers(self, zone: str, accelerator: str) -> bool:
        if accelerator == L4 and zone in self.zones_without_l4:
            return False
        return zone not in self.zones_without.get(accelerator, set())

    def machine_type(self, project: str, zone: str, name: str) -> dict[str, Any]:
        self._zone(project, zone)
        shape = MACHINE_SHAPES.get(name)
        if shape is None or (shape.accelerator and not self.offers(zone, shape.accelerator)):
            raise gce_errors.not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        body = {
            "kind": "compute#machineType",
            "id": str(900_000 + list(MACHINE_SHAPES).index(name)),
            "name": name,
            "description": f"{shape.cpus} vCPUs, {shape.memory_mb // 1024} GB RAM",
            "guestCpus": shape.cpus,
            "memoryMb": shape.memory_mb,
            "zone": zone,
            "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/machineTypes/{name}",
        }
        if shape.accelerator:
            body["accelerators"] = [
                {
                    "guestAcceleratorType": shape.accelerator,
                    "guestAcceleratorCount": shape.accelerator_count,
                }
            ]
        return body

    def accelerator_type(self, project: str, zone: str, name: str) -> dict[str, Any]:
        self._zone(project, zone)
        if name not in ACCELERATORS or not self.offers(zone, name):
            raise gce_errors.not_found(f"projects/{project}/zones/{zone}/acceleratorTypes/{name}")
        return {
            "kind": "compute#acceleratorType",
            "id": str(10041 + list(ACCELERATORS).index(name)),
            "name": name,
            "description": ACCELERATORS[name],
            "maximumCardsPerInstance": 8,
            "zone": f"{API_ROOT}/projects/{project}/zones/{zone}",
            "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/acceleratorTypes/{name}",
        }

    def region(
        self, project: str, region: str, in_use: dict[str, float] | None = None
    ) -> dict[str, Any]:
        """`in_use`: what the project's instances hold now, per metric (the server counts
        them), on top of `region_usage`."""
        zones = [z for z in self.zones if region_of(z) == region]
        if not zones:
            raise gce_errors.not_found(f"projects/{project}/regions/{region}")
        # GPU quotas are per region, spot and on-demand apart:
        # https://cloud.google.com/compute/resource-usage#gpu_quota
        limits = self.region_limits(region)
        usage = dict(self.region_usage.get(region, {}))
        for metric, count in (in_use or {}).items():
            usage[metric] = usage.get(metric, 0.0) + count
        answer: dict[str, Any] = {
            "kind": "compute#region",
            "id": str(1000 + len(region)),
            "name": region,
            "status": "UP",
            "zones": [f"{API_ROOT}/projects/{project}/zones/{z}" for z in zones],
            "quotas": [
                {"metric": metric, "limit": limit, "usage": usage.get(metric, 0.0)}
                for metric, limit in sorted(limits.items())
            ],
            "selfLink": f"{API_ROOT}/projects/{project}/regions/{region}",
        }
        if region in self.quota_warning_regions:
            # "populated only if fetching of the quotas field fails"
            # (https://cloud.google.com/compute/docs/reference/rest/v1/regions)
            del answer["quotas"]
            answer["quotaStatusWarning"] = {
                "code": "UNREACHABLE",
                "message": "Quota information for this region is currently unavailable.",
            }
        return answer

    def project(
        self, project: str, number: int, in_use: dict[str, float] | None = None
    ) -> dict[str, Any]:
        # GPUS_ALL_REGIONS caps GPUs in every region together; it is a project quota:
        # https://cloud.google.com/compute/resource-usage#gpu_quota
        # `id` "is not the project ID, and is just a unique ID used by Compute Engine to
        # identify resources"; the VMs' default account is `defaultServiceAccount`
        # (https://cloud.google.com/compute/docs/reference/rest/v1/projects): an id that
        # differs from the project number keeps a client from taking one for the other.
        return {
            "kind": "compute#project",
            "id": str(7_000_000_000_000_000_000 + number),
            "defaultServiceAccount": f"{number}-compute@developer.gserviceaccount.com",
            "name": project,
            "quotas": [
                {"metric": metric, "limit": limit, "usage": (in_use or {}).get(metric, 0.0)}
                for metric, limit in sorted(self.project_quotas.items())
            ],
            "selfLink": f"{API_ROOT}/projects/{project}",
        }

    def _family(self, project: str, family: str) -> list[FakeImage]:
        if f"{project}/{family}" in self.images:
            return self.images[f"{project}/{family}"]
        if family in PUBLIC_FAMILIES.get(project, ()):
            return [FakeImage(f"{family}{_DEFAULT_IMAGE_SUFFIX}", family)]
        return []  # no such family: getFromFamily answers 404

    def image_from_family(self, project: str, family: str) -> dict[str, Any]:
        # "Returns the latest image that is part of an image family and is not deprecated":
        # https://cloud.google.com/compute/docs/reference/rest/v1/images/getFromFamily
        active = [i for i in self._family(project, family) if i.state == "ACTIVE"]
        if not active:
            raise gce_errors.not_found(f"projects/{project}/global/images/family/{family}")
        return self._image_json(project, active[-1])

    def image(self, project: str, name: str) -> dict[str, Any]:
        """images.get: an image by name, deprecated ones included."""
        for key, images in self.images.items():
            for image in images:
                if key.startswith(f"{project}/") and image.name == name:
                    return self._image_json(project, image)
        family = name.removesuffix(_DEFAULT_IMAGE_SUFFIX)
        if name.endswith(_DEFAULT_IMAGE_SUFFIX) and self._family(project, family):
            return self._image_json(project, FakeImage(name, family))
        raise gce_errors.not_found(f"projects/{project}/global/images/{name}")

    def images_in_family(self, project: str, family: str) -> list[dict[str, Any]]:
        """images.list with `family = "X"`: deprecated ones too (they still exist)."""
        return [self._image_json(project, i) for i in self._family(project, family)]

    def _image_json(self, project: str, image: FakeImage) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "compute#image",
            "id": str(5_000_000 + len(image.name)),
            "name": image.name,
            "family": image.family,
            "status": "READY",
            "diskSizeGb": str(IMAGE_SIZE_GB.get(project, DEFAULT_IMAGE_SIZE_GB)),
            "selfLink": f"{API_ROOT}/projects/{project}/global/images/{image.name}",
        }
        if image.state != "ACTIVE":
            # https://cloud.google.com/compute/docs/images/create-custom#deprecating_an_image
            body["deprecated"] = {"state": image.state}
            if image.replacement:
                body["deprecated"]["replacement"] = image.replacement
        return body
