"""The gce end-to-end fixture: bench pointed at the compute stand-in and fake-gcs-server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


@pytest.fixture
def gce(bench_env, compute_server, gcs_server, gcs_bucket, monkeypatch):
    """bench pointed at both stand-ins; the fake VM's python3 is this test's python."""
    settings = {
        "PROJECT": "bench-test-project",
        "BUCKET": gcs_bucket,
        "ZONES": ",".join(ZONES),
        "COMPUTE_ENDPOINT": compute_server.endpoint,
        "STORAGE_ENDPOINT": gcs_server.endpoint,
        "METADATA_ENDPOINT": compute_server.metadata_url,
        "VM_WORK_DIR": str(bench_env / "vm"),
        "POLL_SECONDS": "0.2",
        # The default account's VMs cannot delete themselves: launch refuses them unless
        # told (tests/e2e/test_gce_money.py tests the refusal).
        "ALLOW_LEFTOVER_DISK": "true",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    compute_server.config.vm_path = [str(Path(sys.executable).parent)]
    # A project whose GPU quota requests were approved (a new one has 0: test_gce_doctor).
    compute_server.catalog.raise_gpu_quotas()
    return compute_server
