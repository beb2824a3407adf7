"""A rendered gce startup script on the compute stand-in, storing into fake-gcs-server.

The stand-in's VM has no GPU, so preflight fails: exactly the path that leaked VMs before
(predecessor.md). The EXIT trap must still upload the log and a `failed` manifest through
the gce partial (curl + metadata token) and power the machine off; GceBackend then sees it
TERMINATED, reads its serial log, and release() deletes it.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.backends.gce.backend import GceBackend, template_vars
from orchestrator.config import BenchConfig
from orchestrator.render import render_shutdown, render_startup
from orchestrator.stores.gcs import GcsStore
from tests.fakes.compute_server import FakeComputeServer
from tests.fakes.fixtures import gcs_bucket, gcs_server  # noqa: F401 - fixtures
from tests.unit.test_gce_builder import make_spec


@pytest.mark.timeout(120)
def test_failed_run_uploads_its_manifest_and_powers_off(gcs_server, gcs_bucket, tmp_path):  # noqa: F811
    with FakeComputeServer() as compute:
        compute.catalog.raise_gpu_quotas()  # a new project has none
        config = BenchConfig(
            project="bench-test-project",
            zones=["us-central1-a", "us-central1-b"],
            bucket=gcs_bucket,
            prefix="bench",
            compute_endpoint=compute.endpoint,
            storage_endpoint=gcs_server.endpoint,
            metadata_endpoint=compute.metadata_url,
        )
        compute.faults.stockout("us-central1-a")
        backend = GceBackend(config, poll_seconds=0.2)
        spec = make_spec()
        work_dir = str(tmp_path / "vm")  # /var/lib/bench/<run id> on a real VM
        startup = render_startup(spec, work_dir, template_vars(config))
        shutdown = render_shutdown(spec, work_dir)
        placement = backend.start(spec, startup, shutdown)
        assert placement.location == "us-central1-b"

        log = "\n".join(backend.log_lines(spec.run_id, placement, follow=True))
        assert backend.machine_state(spec.run_id, placement) == "TERMINATED"
        assert "preflight" in log
        # GCE serves serial output only while the VM runs: a line printed just before the
        # power-off may reach the console after the controller's last read.
        assert "powering off" in compute.serial_output(placement.location, placement.handle)

        store = GcsStore(config)
        manifest = json.loads(store.get_bytes(f"runs/{spec.run_id}/manifest.json"))
        assert manifest["status"] == "failed" and "preflight" in manifest["reason"]
        assert store.exists(f"runs/{spec.run_id}/logs/startup.log")
        status = json.loads(store.get_bytes(f"runs/{spec.run_id}/status.json"))
        assert status["state"] == "failed"

        backend.release(spec.run_id, placement)
        assert backend.machine_state(spec.run_id, placement) == "GONE"
        assert backend.list_machines() == []
