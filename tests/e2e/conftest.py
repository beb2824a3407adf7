"""The gce end-to-end fixture: bench pointed at the compute stand-in and fake-gcs-server;
two real local runs made once for the session."""

from __future__ import annotations

import contextlib
import io
import json
import os
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


@pytest.fixture(scope="session")
def two_local_runs(made_once) -> dict:
    """Two real local runs of a two-config plan, made once for the session (a launch is ~6 s
    of CPU; tests/conftest.py) in an environment of their own, as bench_env makes one: the
    first launched with --wait and left unfetched, the second with --wait --fetch into
    `dest`, what that launch printed and fetched and what `status --json` said then kept;
    then the first fetched beside the second. test_launch_fetch reads what the launch did,
    test_history the two fetched runs (copies: the tests never write into these)."""
    from orchestrator.cli import main
    from orchestrator.registry import RunRegistry
    from tests.e2e.test_gce_cli import plan_file

    def printed(args: list[str]) -> tuple[int, str]:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(args)
        return code, out.getvalue()

    def make(root: Path) -> dict:
        dest = root / "results"
        registry = RunRegistry(root / "state" / "runs.sqlite")
        with pytest.MonkeyPatch.context() as env:
            for name in [name for name in os.environ if name.startswith("BENCH_")]:
                env.delenv(name)
            (root / "work").mkdir()
            env.chdir(root / "work")
            env.setenv("BENCH_STATE_DIR", str(root / "state"))
            env.setenv("XDG_CONFIG_HOME", str(root / "config"))
            launch = ["launch", "--backend", "local", "--budget", "1", "--plan", plan_file(root, 5)]
            assert main([*launch, "--wait"]) == 0  # an earlier run, left unfetched
            (first,) = [r.run_id for r in registry.all()]
            code, launched = printed([*launch, "--wait", "--fetch", "--dest", str(dest)])
            assert code == 0, launched
            (second,) = [r.run_id for r in registry.all() if r.run_id != first]
            fetched_by_launch = sorted(p.name for p in dest.iterdir())
            code, status = printed(["status", "--json"])
            assert code == 0, status
            assert main(["fetch", first, "--dest", str(dest)]) == 0
        return {
            "dest": str(dest),
            "run_ids": [first, second],
            "launch_printed": launched,
            "fetched_by_launch": fetched_by_launch,
            "status_json": json.loads(status),
        }

    return made_once("two-local-runs", make)
