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


# nvidia-smi's answer to the fingerprint's query on an H200 (`nvidia-smi -i 0
# --query-gpu=... --format=csv,noheader,nounits`: one line, fields in the asked order,
# '[N/A]' where the GPU has no such reading).
SMI_LINE = (
    "NVIDIA H200, GPU-0a1b2c3d-0000-1111-2222-333344445555, 570.86.15, "
    "1980, 3201, 1980, 3201, 118.52, 700.00\n"
)


def fake_nvidia_smi(directory, line: str):
    directory.mkdir()
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$@" > "{directory}/args"\n'
        f"printf '%s\\n' {json.dumps(line.strip())}\n"
    )
    script.chmod(0o755)


def test_without_nvml_the_fingerprint_reads_clocks_power_and_driver_from_nvidia_smi(
    tmp_path, monkeypatch
):
    import sys

    fake_nvidia_smi(tmp_path / "bin", SMI_LINE)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    env = fingerprint()
    assert env.gpu_name == "NVIDIA H200" and env.driver == "570.86.15"
    assert (env.sm_clock_mhz, env.mem_clock_mhz) == (1980, 3201)
    assert (env.sm_clock_max_mhz, env.mem_clock_max_mhz) == (1980, 3201)
    assert (env.power_draw_w, env.power_limit_w) == (118.52, 700.0)
    assert env.peak_tflops == 989.0 and env.fp8_peak_tflops == 1979.0  # the H200's row
    args = (tmp_path / "bin" / "args").read_text().split()
    assert "--format=csv,noheader,nounits" in args and "0" in args
    query = next(a for a in args if a.startswith("--query-gpu="))
    assert query.split("=", 1)[1].split(",")[3:6] == ["clocks.sm", "clocks.mem", "clocks.max.sm"]


def test_an_nvidia_smi_field_the_gpu_lacks_stays_unknown():
    from benches.environment import parse_nvidia_smi

    facts = parse_nvidia_smi(SMI_LINE.replace("118.52", "[N/A]").replace("700.00", "[N/A]"))
    assert "power_draw_w" not in facts and "power_limit_w" not in facts
    assert facts["sm_clock_mhz"] == 1980
    assert parse_nvidia_smi("") == {} and parse_nvidia_smi("a, b\n") == {}


def test_the_clocks_and_power_at_the_start_pass_the_boundary():
    accepted = boundary.manifest_from(
        manifest(sm_clock_mhz=1980, mem_clock_mhz=3201, power_draw_w=118.5, driver="570.86.15"),
        RUN_ID,
    )
    env = accepted.environment
    assert (env.sm_clock_mhz, env.mem_clock_mhz, env.power_draw_w) == (1980, 3201, 118.5)
    with pytest.raises(ResultsError, match="manifest.json is invalid"):
        boundary.manifest_from(manifest(power_draw_w=-1.0), RUN_ID)
