"""What a run records of its machine beside its times: the cuDNN torch loaded (as torch
reports it) and NVML's clock and power ceilings, in the environment fingerprint; held at
the trust boundary like every number a run hands back. On a GPU:
tests/gpu/test_sdpa_backends_gpu.py and tests/gpu/test_harness.py."""

from __future__ import annotations

import json

import pytest
import torch

from benches.environment import fingerprint
from orchestrator import boundary
from orchestrator.errors import ResultsError

RUN_ID = "20261129-120000-abcdef"


def test_the_fingerprint_records_the_cudnn_torch_loaded():
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    assert fingerprint().cudnn == (str(cudnn) if cudnn else None)


def manifest(**environment) -> bytes:
    return json.dumps(
        {
            "schema_version": "1",
            "run_id": RUN_ID,
            "status": "failed",
            "reason": "stopped",
            "finished_at": "2026-11-29T12:05:00+00:00",
            "environment": {"torch": "2.13.0", **environment},
        }
    ).encode()


def test_a_manifests_cudnn_and_gpu_ceilings_pass_the_boundary():
    accepted = boundary.manifest_from(
        manifest(cudnn="91900", sm_clock_max_mhz=1980, mem_clock_max_mhz=2619, power_limit_w=700),
        RUN_ID,
    )
    env = accepted.environment
    assert (env.cudnn, env.sm_clock_max_mhz, env.mem_clock_max_mhz) == ("91900", 1980, 2619)
    assert env.power_limit_w == 700.0


@pytest.mark.parametrize(
    "environment",
    [
        {"cudnn": '=HYPERLINK("http://evil.example","9.19")'},
        {"cudnn": "9" * 4000},
        {"cudnn": "9.19.0 (and more)"},
        {"sm_clock_max_mhz": -1},
        {"mem_clock_max_mhz": 10**9},
        {"power_limit_w": -5.0},
    ],
)
def test_a_manifests_environment_out_of_bounds_is_refused(environment):
    with pytest.raises(ResultsError, match="manifest.json is invalid"):
        boundary.manifest_from(manifest(**environment), RUN_ID)
