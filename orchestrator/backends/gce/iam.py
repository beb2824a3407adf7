"""The IAM that contains a run's VM: names, roles and conditions (pure; docs/security.md).

`bench setup` grants them (setup.py) and `bench doctor` looks for them (readiness).
"""

from __future__ import annotations

VM_ACCOUNT_ID = "bench-vm"
SELF_DELETE_ROLE_ID = "benchSelfDelete"
# Deleting a VM deletes its auto-delete boot disk. The pages of Google's we could read (the
# instances.delete reference, https://cloud.google.com/compute/docs/instances/deleting-instance)
# do not settle whether that also needs compute.disks.delete on the disk, so the role holds
# both, each only on bench-* names (see self_delete_condition): least privilege either way. A
# disk still attached to a VM cannot be deleted
# (https://cloud.google.com/sdk/gcloud/reference/compute/disks/delete), so the extra
# permission reaches no other run's live disk.
SELF_DELETE_PERMISSIONS = ("compute.instances.delete", "compute.disks.delete")
OBJECT_WRITER_ROLE_ID = "benchRunObjects"
# storage.objects.delete is what lets a VM replace its own status.json: overwriting an
# object needs it besides storage.objects.create
# (https://cloud.google.com/storage/docs/access-control/iam-permissions). No list: a VM
# that cannot list cannot find another run's key.
OBJECT_WRITER_PERMISSIONS = [
    "storage.objects.create",
    "storage.objects.delete",
    "storage.objects.get",
]
# The cache is read, never written. A custom role rather than a predefined one: the
# legacy roles that hold storage.objects.get alone are meant for ACL parity, and the
# conditional grant needs a role that is plainly IAM
# (https://cloud.google.com/storage/docs/access-control/iam-roles).
CACHE_READER_ROLE_ID = "benchCacheReader"
CACHE_READER_PERMISSIONS = ["storage.objects.get"]
INSTANCE_PREFIX = "bench-"


def objects_condition(bucket: str, prefix: str, folder: str) -> str:
    """Objects under <prefix>/<folder>/ of the bucket, in Cloud Storage's documented resource
    name form for IAM conditions, projects/_/buckets/B/objects/NAME
    (https://cloud.google.com/storage/docs/access-control/iam#conditions)."""
    start = "/".join(part for part in (prefix.strip("/"), folder) if part)
    return f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{start}/")'


def self_delete_condition(project: str) -> str:
    """Instances of this project named bench-*, and disks named bench-* (a boot disk is named
    after its VM: AttachedDiskInitializeParams.diskName in the compute v1 API), on the full
    resource names that IAM conditions see for Compute Engine,
    projects/P/zones/Z/instances/NAME and projects/P/zones/Z/disks/NAME
    (https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name);
    extract() as documented at
    https://cloud.google.com/iam/docs/conditions-attribute-reference#extract."""
    return " || ".join(
        f'(resource.type == "compute.googleapis.com/{kind}" && '
        f'resource.name.startsWith("projects/{project}/zones/") && '
        f'resource.name.extract("/{collection}/{{name}}").startsWith("{INSTANCE_PREFIX}"))'
        for kind, collection in (("Instance", "instances"), ("Disk", "disks"))
    )
