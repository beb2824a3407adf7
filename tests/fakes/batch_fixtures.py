"""Pytest fixtures for the Batch stand-in: `batch_server`, and `batch` (bench pointed at it,
fake-gcs-server behind the bucket's IAM proxy, and the compute stand-in). A test module binds
them by name: `batch = batch_fixtures.batch`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.backends.gce.iam import (
    CACHE_READER_PERMISSIONS,
    CACHE_READER_ROLE_ID,
    OBJECT_WRITER_PERMISSIONS,
    OBJECT_WRITER_ROLE_ID,
    objects_condition,
)
from orchestrator.backends.gce.setup import vm_account_email

from .batch_server import FakeBatchServer
from .gcs_proxy import GcsIamProxy

PREFIX = "bench"  # BenchConfig's default object prefix


@pytest.fixture
def batch_server():
    with FakeBatchServer() as server:
        yield server


def bucket_as_setup_leaves_it(proxy: GcsIamProxy, bucket: str, project: str) -> None:
    """`bench setup`'s grants on the bucket (docs/security.md): the signer's role on runs/,
    the VM account's read-only role on cache/, nothing else."""
    runs, cache = (
        {"title": folder, "expression": objects_condition(bucket, PREFIX, folder)}
        for folder in ("runs", "cache")
    )
    signer = f"serviceAccount:bench-signer@{project}.iam.gserviceaccount.com"
    proxy.grant(signer, f"projects/{project}/roles/{OBJECT_WRITER_ROLE_ID}", runs)
    vm = f"serviceAccount:{vm_account_email(project)}"
    proxy.grant(vm, f"projects/{project}/roles/{CACHE_READER_ROLE_ID}", cache)


def bucket_proxy(batch_server, compute_server, gcs_server, iam_credentials) -> GcsIamProxy:
    """The bucket's IAM proxy in front of fake-gcs-server (not started); a job VM's token is
    its job's account (the Batch stand-in's), a gce VM's the compute stand-in's."""
    project = batch_server.project
    roles = {
        f"projects/{project}/roles/{OBJECT_WRITER_ROLE_ID}": {
            "includedPermissions": OBJECT_WRITER_PERMISSIONS
        },
        f"projects/{project}/roles/{CACHE_READER_ROLE_ID}": {
            "includedPermissions": CACHE_READER_PERMISSIONS
        },
    }
    return GcsIamProxy(
        gcs_server.endpoint,
        lambda token: (
            batch_server.identity_of_token(token) or compute_server.identity_of_token(token)
        ),
        custom_roles=roles,
        public_key_of=iam_credentials.public_key,
    )


@pytest.fixture
def batch(
    bench_env,
    batch_server,
    compute_server,
    gcs_server,
    gcs_bucket,
    iam_credentials,
    monkeypatch,
):
    """bench pointed at the Batch stand-in and fake-gcs-server behind the bucket's IAM
    proxy as `bench setup` leaves it (`batch.bucket_proxy`), and the compute stand-in, which
    `status` and `stop-all` also search, sharing its project IAM with Batch's; the task's
    python3 is this test's python."""
    batch_server.iam = compute_server.iam
    proxy = bucket_proxy(batch_server, compute_server, gcs_server, iam_credentials).start()
    bucket_as_setup_leaves_it(proxy, gcs_bucket, batch_server.project)
    batch_server.bucket_proxy = proxy
    settings = {
        "PROJECT": batch_server.project,
        # Batch runs as bench's own account only (backends/batch/builder.py).
        "SERVICE_ACCOUNT": vm_account_email(batch_server.project),
        "BUCKET": gcs_bucket,
        "ZONES": "us-central1-a,us-central1-b,us-central1-c",
        "BATCH_ENDPOINT": batch_server.endpoint,
        "COMPUTE_ENDPOINT": compute_server.endpoint,
        "STORAGE_ENDPOINT": proxy.endpoint,
        "METADATA_ENDPOINT": batch_server.metadata_url,
        "IAMCREDENTIALS_ENDPOINT": iam_credentials.sign_for(batch_server.project),
        "VM_WORK_DIR": str(bench_env / "vm"),
        "POLL_SECONDS": "0.2",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    batch_server.vm_path = [str(Path(sys.executable).parent)]
    try:
        yield batch_server
    finally:
        proxy.stop()
