"""Measure stop-all against the compute stand-in: not a test, a figure to report.

40 bench-labelled instances spread over 6 zones plus 3 unlabelled ones; every API call
waits 200 ms (injected latency). Times GceBackend.list_machines() + stop() with the real
google-cloud-compute client and checks only the labelled ones were deleted. Target: < 5 s.

    python tools/bench_stop_all.py [--latency 0.2] [--instances 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.gce.builder import build_instance
from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.config import BenchConfig
from tests.fakes.compute_server import FakeComputeServer
from tests.unit.test_gce_builder import make_spec

ZONES = [
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
    "us-east4-a",
    "us-east4-c",
]


def populate(server: FakeComputeServer, config: BenchConfig, instances: int) -> None:
    api = ComputeApi(config)
    for i in range(instances + 3):
        zone = ZONES[i % len(ZONES)]
        spec = make_spec(run_id=f"20261101-{i:06d}-abcdef")
        instance = build_instance(spec, config, zone, "#!/bin/bash\n", "", True)
        if i >= instances:
            instance.labels = {"team": "not-bench"}
        api.insert(zone, instance)


def one_round(latency: float, instances: int) -> tuple[float, int, int]:
    with FakeComputeServer(run_scripts=False, zones=tuple(ZONES)) as server:
        server.catalog.raise_gpu_quotas(limit=1000.0)  # a new project has none
        config = BenchConfig(
            project="bench-test-project",
            bucket="b-bucket",
            zones=ZONES,
            compute_endpoint=server.endpoint,
        )
        populate(server, config, instances)
        server.faults.latency(latency)
        backend = GceBackend(config)
        backend.api.instances  # noqa: B018 - build the client outside the timing
        backend.api.operations  # noqa: B018
        started = time.perf_counter()
        stopped = backend.stop(backend.list_machines())
        elapsed = time.perf_counter() - started
        left = [i for i in server.instances() if not i.deleted]
        return elapsed, len(stopped), len(left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--instances", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times = []
    for _ in range(args.repeat):
        elapsed, stopped, left = one_round(args.latency, args.instances)
        assert stopped == args.instances, f"stopped {stopped}, expected {args.instances}"
        assert left == 3, f"{left} instances left, expected the 3 unlabelled ones"
        times.append(elapsed)
        print(f"stop-all: {stopped} deleted, {left} unlabelled kept, {elapsed:.2f} s")
    print(
        f"median {statistics.median(times):.2f} s over {len(times)} rounds "
        f"({args.instances} instances, {len(ZONES)} zones, {args.latency * 1000:.0f} ms per call)"
    )
    return 0 if statistics.median(times) < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
