"""Issue 53's evidence on a real GPU: the run's record of its clocks, power, driver and cuDNN
(benches/environment.py) agrees with nvidia-smi's; `--profile`'s measured tensor FLOPs and
DRAM bytes (benches/profile.py) stand beside the formula's as the counters' definitions
say they should: a non-causal attention's tensor FLOPs are the formula's 4·B·H·S²·D, and
its DRAM traffic at least q, k, v read and o written once.

Skipped without a CUDA GPU; the profile tests without Nsight Compute or where its counters
are restricted to admins (the skip says which)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from benches import environment, peers, profile
from results_schema import AttentionConfig, Plan
from results_schema.gpu_kinds import kind_of
from results_schema.models import ProfileRequest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_the_fingerprint_records_clocks_power_driver_and_cudnn_as_nvidia_smi_reads_them():
    env = environment.fingerprint()
    assert env.driver and env.cudnn and env.gpu_name
    assert env.sm_clock_mhz and env.mem_clock_mhz and env.power_draw_w and env.power_limit_w
    assert env.sm_clock_max_mhz >= env.sm_clock_mhz > 0
    if shutil.which("nvidia-smi"):
        smi = environment._nvidia_smi_facts()
        assert smi["driver"] == env.driver and smi["gpu_name"] == env.gpu_name
        assert smi["sm_clock_max_mhz"] == env.sm_clock_max_mhz
        assert smi["power_limit_w"] == pytest.approx(env.power_limit_w, rel=0.01)
    kind = kind_of(env.gpu_name)
    if kind is not None and kind.arch in ("sm_89", "sm_90"):
        assert env.fp8_peak_tflops == kind.fp8_peak_tflops and env.fp8_peak_tflops > 0


def _plan(config: AttentionConfig, candidate: str, compared_with: list[str]) -> Plan:
    return Plan(
        name="evidence",
        description="",
        device="cuda",
        candidate=candidate,
        compared_with=compared_with,
        reference="reference",
        samples_per_config=1,
        configs=[config],
        profile=ProfileRequest(
            configs=[config.name], sections=["SpeedOfLight"], timeout_seconds=600
        ),
    )


def _profile(plan: Plan, tmp_path) -> list:
    if profile.find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    results = tmp_path / "results"
    results.mkdir()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    passed = {(c.name, i) for c in plan.configs for i in plan.profiled_identities}
    rows = profile.profile_plan(plan, "r", plan_file, results, passed, lambda: False)
    if rows[0].state == "restricted":
        pytest.skip(rows[0].message)
    return rows


def test_ncu_asks_for_the_work_counters_this_gpu_has():
    ncu = profile.find_ncu()
    if ncu is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    query = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    asked = profile.work_metrics(profile.parse_metric_names(query.stdout))
    assert "dram__bytes.sum" in asked and profile.SM_CLOCK in asked
    assert any(m.startswith("sm__ops_path_tensor_src_bf16") for m in asked), asked
    if torch.cuda.get_device_capability() >= (8, 9):
        assert any(m.startswith("sm__ops_path_tensor_src_fp8") for m in asked), asked


def test_a_16_bit_profile_measures_the_formulas_flops_and_at_least_its_bytes(tmp_path):
    config = AttentionConfig(
        name="bf16-b2h16s2048d128",
        batch=2,
        heads=16,
        seq_len=2048,
        head_dim=128,
        dtype="bfloat16",
        causal=False,
    )
    rows = _profile(_plan(config, "sdpa-flash", ["sdpa-cudnn"]), tmp_path)
    for row in rows:
        assert row.state == "profiled", row.message
        print(
            f"{row.implementation}: tensor {row.tensor_flops:.4g} (formula "
            f"{row.formula_flops:.4g}), DRAM {row.dram_bytes:.4g} (least "
            f"{row.formula_dram_bytes:.4g}), SM {row.sm_clock_mhz:.0f} MHz"
        )
        assert row.tensor_flops == pytest.approx(row.formula_flops, rel=0.02)
        # The inputs must come from DRAM (ncu flushes the caches before each pass); the
        # output may still sit in L2 when the kernel ends (an H200 read 57.8 MB of the
        # 67.1 MB that q, k, v and o hold: 50.3 MB of inputs): q, k, v are 3/4 of it here.
        assert row.dram_bytes >= 0.9 * 0.75 * row.formula_dram_bytes
        assert 100 < row.sm_clock_mhz < 5000


def test_an_fp8_profile_counts_the_fp8_tensor_pipe(tmp_path):
    pytest.importorskip("cudnn")
    if torch.cuda.get_device_capability() < peers.CUDNN_FP8_MIN_CAPABILITY:
        pytest.skip("cuDNN's FP8 SDPA with a bfloat16 output needs sm_100 or newer")
    config = AttentionConfig(
        name="fp8-b1h16s4096d128",
        batch=1,
        heads=16,
        seq_len=4096,
        head_dim=128,
        dtype="float8_e4m3fn",
        causal=False,
    )
    (row,) = _profile(_plan(config, "cudnn-fe", ["reference"]), tmp_path)[:1]
    assert row.state == "profiled", row.message
    print(f"cudnn-fe fp8: tensor {row.tensor_flops:.4g} (formula {row.formula_flops:.4g})")
    assert row.tensor_flops == pytest.approx(row.formula_flops, rel=0.02)
