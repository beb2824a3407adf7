"""Pytest fixtures for the Batch stand-in: `batch_server`, and `batch` (bench pointed at it,
fake-gcs-server and the compute stand-in). A test module binds them by name:
`batch = batch_fixtures.batch`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.backends.gce.setup import vm_account_email

from .batch_server import FakeBatchServer


@pytest.fixture
def batch_server():
    with FakeBatchServer() as server:
        yield server


@pytest.fixture
def batch(
    bench_env, batch_server, compute_server, gcs_server, gcs_bucket, iam_credentials, monkeypatch
):
    """bench pointed at the Batch stand-in and fake-gcs-server (and the compute stand-in,
    which `status` and `stop-all` also search); the task's python3 is this test's python."""
    settings = {
        "PROJECT": batch_server.project,
        # Batch runs as bench's own account only (backends/batch/builder.py).
        "SERVICE_ACCOUNT": vm_account_email(batch_server.project),
        "BUCKET": gcs_bucket,
        "ZONES": "us-central1-a,us-central1-b,us-central1-c",
        "BATCH_ENDPOINT": batch_server.endpoint,
        "COMPUTE_ENDPOINT": compute_server.endpoint,
        "STORAGE_ENDPOINT": gcs_server.endpoint,
        "METADATA_ENDPOINT": batch_server.metadata_url,
        "IAMCREDENTIALS_ENDPOINT": iam_credentials.sign_for(batch_server.project),
        "VM_WORK_DIR": str(bench_env / "vm"),
        "POLL_SECONDS": "0.2",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    batch_server.vm_path = [str(Path(sys.executable).parent)]
    return batch_server
