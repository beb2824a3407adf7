"""Pure builders for Compute Engine requests: RunSpec -> compute_v1.Instance, names, labels.

Nothing here talks to the network, so every rule GCE would enforce is checked (and
unit-tested) before a request is sent: a bad name costs a UsageError, not a failed launch.
compute_v1 is imported inside `build_instance` only; the validators need no SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from orchestrator.errors import UsageError
from orchestrator.users import sanitize_label_value

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Instance

    from orchestrator.config import BenchConfig
    from orchestrator.spec import RunSpec

MANAGED_LABEL = "bench-managed"
RUN_LABEL = "bench-run"
OWNER_LABEL = "bench-owner"
SWEEP_LABEL = "bench-sweep"

# The VM's token reads the build cache, nothing more: its payload and its uploads go through
# the grants launch signs for its run (signing.py), which carry no token and so no scope.
# Read-only storage, then. With the dedicated account that `bench setup` creates it may also
# delete itself, which needs the compute scope as well as its IAM role
# (https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam); the default
# account keeps storage only: with the compute scope its broad project roles would reach
# every VM.
STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"
DEFAULT_SERVICE_ACCOUNT = "default"


def vm_may_delete_itself(config: BenchConfig) -> bool:
    """True with a dedicated VM service account (`bench setup`): its run deletes its VM."""
    return config.service_account != DEFAULT_SERVICE_ACCOUNT


def vm_scopes(config: BenchConfig) -> list[str]:
    return [STORAGE_SCOPE, COMPUTE_SCOPE] if vm_may_delete_itself(config) else [STORAGE_SCOPE]


_RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_MAX_LABELS = 64
# Instance metadata: 256 KB a value, 512 KB for all entries together
# (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations). The
# compute v1 discovery document (Metadata.items) says it in bytes: a value "less than or
# equal to 262144 bytes (256 KiB)"; "The total size of all keys and values must be less
# than 512 KB".
METADATA_VALUE_MAX_BYTES = 256 * 1024
METADATA_TOTAL_LIMIT_BYTES = 512 * 1024


def is_valid_resource_name(name: str) -> bool:
    """GCE's rule for instance (and most resource) names: RFC 1035, at most 63 characters."""
    return bool(_RESOURCE_NAME.fullmatch(name))


def validate_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Check keys and values against GCE's label rules; return them as a plain dict."""
    if len(labels) > _MAX_LABELS:
        raise UsageError(f"{len(labels)} labels given; GCE allows at most {_MAX_LABELS}")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise UsageError(
                f"label key {key!r} is invalid: start with a lowercase letter, then up to 62 "
                "lowercase letters, digits, '_' or '-'"
            )
        if not _LABEL_VALUE.fullmatch(value):
            raise UsageError(
                f"label {key}={value!r} is invalid: values are up to 63 lowercase letters, "
                "digits, '_' or '-'"
            )
    return dict(labels)


def label_filter(key: str, value: str) -> str:
    """A list filter matching one label, e.g. `labels.bench-managed = "true"`."""
    validate_labels({key: value})
    return f'labels.{key} = "{value}"'


def managed_filter() -> str:
    return label_filter(MANAGED_LABEL, "true")


def run_labels(run_id: str, owner: str, sweep_id: str | None = None) -> dict[str, str]:
    labels = {MANAGED_LABEL: "true", RUN_LABEL: run_id, OWNER_LABEL: sanitize_label_value(owner)}
    if sweep_id:
        labels[SWEEP_LABEL] = sweep_id
    return validate_labels(labels)


def _require_name(kind: str, name: str) -> None:
    if not is_valid_resource_name(name):
        raise UsageError(
            f"{kind} {name!r} is not a valid GCE name: 1-63 characters, lowercase letters, "
            "digits and '-', starting with a letter and not ending with '-'"
        )


def check_metadata(items: Mapping[str, str]) -> None:
    """UsageError, before any insert, for metadata GCE would refuse: a value over
    256 KiB, or keys and values of 512 KiB or more in all. The message gives each size."""
    sizes = {key: len(value.encode()) for key, value in items.items()}
    total = sum(len(key.encode()) + size for key, size in sizes.items())
    too_long = [key for key, size in sizes.items() if size > METADATA_VALUE_MAX_BYTES]
    if not too_long and total < METADATA_TOTAL_LIMIT_BYTES:
        return
    each = ", ".join(f"{key} {size:,}" for key, size in sizes.items())
    culprit = " and ".join(too_long) + " too long" if too_long else "too much in all"
    raise UsageError(
        f"the VM's metadata would be {total:,} bytes, keys included ({each}): {culprit} "
        f"for GCE, which takes at most {METADATA_VALUE_MAX_BYTES:,} bytes (256 KiB) a value "
        f"and less than {METADATA_TOTAL_LIMIT_BYTES:,} (512 KiB) in all. Shorten what the "
        "startup script carries (a user kernel's build command or requirements). Nothing "
        "was created"
    )


def build_instance(
    spec: RunSpec,
    config: BenchConfig,
    zone: str,
    startup_script: str,
    shutdown_script: str,
    spot: bool,
    disk_gb: int | None = None,
) -> Instance:
    """The instance insert body for one run in one zone. `disk_gb`: the boot disk's size,
    the one its cost was priced at (default: `config.disk_gb`; unset, GCE sizes it as the
    image).

    The cloud enforces the time cap: `max_run_duration` with DELETE removes a VM still
    running at the budget's end (and its disk), even if the user's laptop is gone. It does
    not remove a VM that powered itself off: GCE clears the timer when a VM stops.
    """
    from google.cloud import compute_v1

    _require_name("instance name", spec.instance_name)
    _require_name("machine type", config.machine_type)
    _require_name("accelerator type", config.accelerator_type)
    _require_name("image family", config.image_family)
    metadata = {"startup-script": startup_script, "shutdown-script": shutdown_script}
    check_metadata(metadata)
    labels = run_labels(spec.run_id, spec.owner, spec.sweep_id)

    scheduling = compute_v1.Scheduling(
        provisioning_model="SPOT" if spot else "STANDARD",
        instance_termination_action="DELETE",
        max_run_duration=compute_v1.Duration(seconds=spec.max_run_seconds),
        # GPUs cannot live-migrate, and spot VMs must not come back on their own.
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
    )
    boot_disk = compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        type_="PERSISTENT",
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=f"projects/{config.image_project}/global/images/family/{config.image_family}",
            # Unset, GCE sizes the disk as the image (compute v1 discovery document,
            # AttachedDiskInitializeParams.diskSizeGb): the smallest the image allows. Set
            # to the size launch priced (the image's, read before the insert), a newer and
            # larger image of the family fails the insert instead of billing more.
            disk_size_gb=disk_gb or config.disk_gb,
            disk_type=f"zones/{zone}/diskTypes/pd-balanced",
            labels=labels,
        ),
    )
    # An external address, priced with the machine (prices.toml, external_ipv4): without one
    # the VM would still reach Cloud Storage through Private Google Access, but not PyPI,
    # where a bare CUDA image's environment, the peers (--peers) and users' kernels'
    # requirements come from, and the default network's subnets need not have the access on.
    network = compute_v1.NetworkInterface(
        network="global/networks/default",
        access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
    )
    return compute_v1.Instance(
        name=spec.instance_name,
        machine_type=f"zones/{zone}/machineTypes/{config.machine_type}",
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{config.accelerator_type}",
                accelerator_count=config.accelerator_count,
            )
        ],
        disks=[boot_disk],
        network_interfaces=[network],
        scheduling=scheduling,
        labels=labels,
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key=key, value=value) for key, value in metadata.items()]
        ),
        # "default" is the project's Compute Engine default service account.
        service_accounts=[
            compute_v1.ServiceAccount(email=config.service_account, scopes=vm_scopes(config))
        ],
    )
