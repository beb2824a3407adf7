"""The environment fingerprint: what the numbers were measured on (EnvironmentFingerprint)."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from benches import cpu_threads
from results_schema import EnvironmentFingerprint
from results_schema.gpu_kinds import kind_of


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _nvcc_version() -> str | None:
    """The version of the nvcc a kernel build finds (CUDA_HOME first, then PATH, then the
    toolkit's usual place), as kernel builds look for it."""
    nvcc = _find_nvcc()
    if nvcc is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
        lines = [line for line in out.splitlines() if "release" in line]
        return lines[-1].strip() if lines else out.strip() or None
    return None


def _find_nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    places = [Path(cuda_home) / "bin" / "nvcc"] if cuda_home else []
    on_path = shutil.which("nvcc")
    places += [Path(on_path)] if on_path else []
    places.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((str(place) for place in places if place.is_file()), None)


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    return platform.processor() or None


def _nvml_facts() -> dict[str, Any]:
    """GPU name, UUID, count and driver from NVML, and the ceilings the per-sample
    telemetry (benches/telemetry.py) is read against: the highest SM and memory clocks and
    the power limit in force; empty without a GPU or nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts = {
            "gpu_name": _text(pynvml.nvmlDeviceGetName(handle)),
            "gpu_uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
            "gpu_count": pynvml.nvmlDeviceGetCount(),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        }
    except pynvml.NVMLError:
        return {}
    try:
        return facts | _nvml_ceilings(pynvml, handle)
    finally:
        pynvml.nvmlShutdown()


def _nvml_ceilings(pynvml: Any, handle: Any) -> dict[str, Any]:
    """The ceilings and the clocks and power draw when the run starts. Each on its own: a
    GPU or driver that lacks one (some report no power limit) keeps the others."""
    queries = {
        "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(
            handle, pynvml.NVML_CLOCK_MEM
        ),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "power_draw_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
    }
    facts = {}
    for name, query in queries.items():
        with contextlib.suppress(pynvml.NVMLError):
            facts[name] = query()
    return facts


# nvidia-smi's --query-gpu fields (`nvidia-smi --help-query-gpu`) for what NVML would give,
# read where nvidia-ml-py is missing or answers less: the GPU machine has nvidia-smi.
SMI_FIELDS = {
    "name": "gpu_name",
    "uuid": "gpu_uuid",
    "driver_version": "driver",
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz",
    "clocks.max.mem": "mem_clock_max_mhz",
    "power.draw": "power_draw_w",
    "enforced.power.limit": "power_limit_w",
}
SMI_TIMEOUT_SECONDS = 20


def parse_nvidia_smi(text: str) -> dict[str, Any]:
    """The first GPU's line of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,
    nounits` as fingerprint facts; '[N/A]' and '[Not Supported]' stay unknown."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    values = [value.strip() for value in lines[0].split(",")]
    if len(values) != len(SMI_FIELDS):
        return {}
    facts: dict[str, Any] = {}
    for key, value in zip(SMI_FIELDS.values(), values, strict=True):
        if not value or value.startswith("["):
            continue
        if key.endswith("_mhz"):
            with contextlib.suppress(ValueError):
                facts[key] = int(float(value))
        elif key.endswith("_w"):
            with contextlib.suppress(ValueError):
                facts[key] = float(value)
        else:
            facts[key] = value
    return facts


def _nvidia_smi_facts() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    command = [smi, "-i", "0", f"--query-gpu={','.join(SMI_FIELDS)}"]
    command.append("--format=csv,noheader,nounits")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(command, capture_output=True, text=True, timeout=SMI_TIMEOUT_SECONDS)
        return parse_nvidia_smi(out.stdout) if out.returncode == 0 else {}
    return {}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    facts: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    facts["cudnn"] = str(cudnn) if cudnn else None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts["gpu_name"] = props.name
        facts["gpu_count"] = torch.cuda.device_count()
        facts["compute_capability"] = f"{props.major}.{props.minor}"
        facts["sm_count"] = props.multi_processor_count
        facts["l2_cache_bytes"] = getattr(props, "L2_cache_size", None)
    return facts


def _bool_env(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    return value.strip().lower() in ("1", "true", "yes", "spot")


def fingerprint() -> EnvironmentFingerprint:
    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "triton": _version("triton"),
        "nvcc": _nvcc_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "image": os.environ.get("BENCH_IMAGE") or None,
        # image (its own python had every package), cache, built (a venv) or given (local)
        "environment_source": os.environ.get("BENCH_ENV_SOURCE") or None,
        "machine_type": os.environ.get("BENCH_MACHINE_TYPE") or None,
        "zone": os.environ.get("BENCH_ZONE") or None,
        "spot": _bool_env("BENCH_SPOT"),
        "cpu_threads": cpu_threads.in_force(),
    }
    facts.update(_torch_facts())
    # NVML's name and UUID win over torch's: they match nvidia-smi and the NVML telemetry.
    nvml = {k: v for k, v in _nvml_facts().items() if v is not None}
    facts.update(nvml)
    if not set(SMI_FIELDS.values()) <= set(nvml):  # no nvidia-ml-py, or a GPU it answers less
        facts.update({k: v for k, v in _nvidia_smi_facts().items() if k not in nvml})
    kind = kind_of(facts.get("gpu_name"))  # results_schema/gpu_kinds.json: one row a kind
    facts["peak_tflops"] = kind.peak_tflops if kind else None
    facts["fp8_peak_tflops"] = kind.fp8_peak_tflops if kind else None
    facts["peak_gbytes_per_s"] = kind.bandwidth_gb_s if kind else None
    return EnvironmentFingerprint.model_validate(facts)
