"""By hand, unscaled: `bench launch --backend gce --wait` when the insert operation takes
90 s and zoneOperations.wait holds each call its full 2 minutes, as GCE may.

Not a test (it takes about two minutes): the suite runs the same scenario scaled 1:60
(tests/e2e/test_gce_cli.py::test_an_insert_slower_than_the_http_timeout_still_launches).
Prints the wall time, the waits the controller made and what is left in the project.

    python tools/slow_insert_by_hand.py [--insert-seconds 90] [--wait-seconds 120]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.cli import main  # noqa: E402
from orchestrator.service.plans import plans_dir  # noqa: E402
from results_schema import Plan  # noqa: E402
from tests.fakes.compute_server import FakeComputeServer  # noqa: E402
from tests.fakes.gcs import FakeGcs  # noqa: E402


def small_plan(directory: Path) -> str:
    plan = Plan.model_validate_json((plans_dir() / "cpu-smoke.json").read_text())
    plan = plan.model_copy(
        update={
            "name": "by-hand",
            "samples_per_config": 5,
            "configs": plan.configs[:2],
            "candidate": "sdpa",
        }
    )
    path = directory / "plan.json"
    path.write_text(plan.model_dump_json())
    return str(path)


def run(insert_seconds: float, wait_seconds: float) -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-by-hand-"))
    with (
        FakeGcs() as gcs,
        FakeComputeServer(provisioning_s=insert_seconds, operation_wait_s=wait_seconds) as compute,
    ):
        bucket = f"bench-by-hand-{uuid.uuid4().hex[:8]}"
        gcs.client().create_bucket(bucket)
        compute.config.vm_path = [str(Path(sys.executable).parent)]
        os.environ.update(
            BENCH_PROJECT="bench-test-project",
            BENCH_BUCKET=bucket,
            BENCH_COMPUTE_ENDPOINT=compute.endpoint,
            BENCH_STORAGE_ENDPOINT=gcs.endpoint,
            BENCH_METADATA_ENDPOINT=compute.metadata_url,
            BENCH_VM_WORK_DIR=str(work / "vm"),
            BENCH_STATE_DIR=str(work / "state"),
            BENCH_POLL_SECONDS="1",
        )
        started = time.monotonic()
        code = main(
            ["launch", "--backend", "gce", "--budget", "1", "--plan", small_plan(work), "--wait"]
        )
        elapsed = time.monotonic() - started
        waits = compute.calls("zoneOperations.wait")
        print(
            f"exit {code} after {elapsed:.1f} s wall; {len(waits)} zoneOperations.wait calls; "
            f"{len(compute.calls('instances.insert'))} insert(s); "
            f"{len(compute.instances())} instance(s) left"
        )
        return code


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--insert-seconds", type=float, default=90.0)
    parser.add_argument("--wait-seconds", type=float, default=120.0)
    args = parser.parse_args()
    sys.exit(run(args.insert_seconds, args.wait_seconds))
