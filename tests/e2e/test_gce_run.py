"""A rendered gce startup script on the compute stand-in, storing into fake-gcs-server.

The stand-in's VM has no GPU, so preflight fails: exactly the path that leaked VMs before
(predecessor.md). The EXIT trap must still upload the log and a `failed` manifest through
the gce partial (curl, with the POST policy launch signs for this run alone, behind the
bucket's IAM proxy as `bench setup` leaves it) and power the machine off; GceBackend then
sees it TERMINATED, reads its serial log, and release() deletes it. (Without the run's
grants no manifest can reach the store, and the script stays up 180 s so bench can read
why: longer than this test's limit.)
"""

from __future__ import annotations

import json

import pytest

from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.gce.iam import objects_condition
from orchestrator.backends.gce.script_vars import template_vars
from orchestrator.backends.gce.signing import signer_email
from orchestrator.config import BenchConfig
from orchestrator.render import render_shutdown, render_startup
from orchestrator.stores.gcs import GcsStore
from tests.fakes.compute_server import FakeComputeServer
from tests.fakes.compute_state import project_number
from tests.fakes.fixtures import gcs_bucket, gcs_server  # noqa: F401 - fixtures
from tests.fakes.gcs_proxy import GcsIamProxy
from tests.unit.test_gce_builder import make_spec

PROJECT = "bench-test-project"


@pytest.mark.timeout(120)
def test_failed_run_uploads_its_manifest_and_powers_off(
    gcs_server,  # noqa: F811
    gcs_bucket,  # noqa: F811
    iam_credentials,
    tmp_path,
):
    with (
        FakeComputeServer() as compute,
        GcsIamProxy(
            gcs_server.endpoint, compute.identity_of_token, public_key_of=iam_credentials.public_key
        ) as proxy,
    ):
        compute.catalog.raise_gpu_quotas()  # a new project has none
        config = BenchConfig(
            project=PROJECT,
            zones=["us-central1-a", "us-central1-b"],
            bucket=gcs_bucket,
            prefix="bench",
            compute_endpoint=compute.endpoint,
            storage_endpoint=proxy.endpoint,
            iamcredentials_endpoint=iam_credentials.sign_for(PROJECT),
            metadata_endpoint=compute.metadata_url,
        )
        # As `bench setup` leaves the bucket: the signer on runs/, the VM's account on cache/;
        # the VM reaches its run's objects only through the grants signed for this run.
        runs = objects_condition(gcs_bucket, "bench", "runs")
        cache = objects_condition(gcs_bucket, "bench", "cache")
        proxy.grant(
            f"serviceAccount:{signer_email(config)}",
            condition={"title": "runs", "expression": runs},
        )
        proxy.grant(
            f"serviceAccount:{project_number(PROJECT)}-compute@developer.gserviceaccount.com",
            "roles/storage.objectViewer",
            condition={"title": "cache", "expression": cache},
        )
        compute.faults.stockout("us-central1-a")
        backend = GceBackend(config, poll_seconds=0.2)
        spec = make_spec()
        work_dir = str(tmp_path / "vm")  # /var/lib/bench/<run id> on a real VM
        variables = {**template_vars(config), **backend.run_access_vars(spec)}
        startup = render_startup(spec, work_dir, variables)
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
        assert proxy.denied == []

        backend.release(spec.run_id, placement)
        assert backend.machine_state(spec.run_id, placement) == "GONE"
        assert backend.list_machines() == []
