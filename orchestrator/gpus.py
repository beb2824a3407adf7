"""GPU types bench can start (orchestrator/data/gpus.toml): `--gpu l4,t4,a100,h100`.

Each key names a machine shape, its zones and its GPU's kind (results_schema/gpu_kinds.json:
arch, peak figures). A sweep
member's settings are the user's settings with that shape and those zones in place
(`member_config`); nothing else differs between members.
"""

from __future__ import annotations

import shutil
import subprocess

from orchestrator.config import BenchConfig
from orchestrator.errors import UsageError
from orchestrator.gpu_catalog import GpuType, load_gpu_catalog
from results_schema.gpu_kinds import kind_of

DEFAULT_GPU = "l4"
# `--gpu local` on the local backend: whatever GPU this machine has.
LOCAL_GPU = "local"


def parse_gpu_list(text: str, catalog: dict[str, GpuType] | None = None) -> list[str]:
    """`l4,t4` -> ["l4", "t4"]: known keys (or `local`), once each, in the order given."""
    catalog = catalog if catalog is not None else load_gpu_catalog()
    keys = list(dict.fromkeys(k.strip().lower() for k in text.split(",") if k.strip()))
    if not keys:
        raise UsageError("--gpu needs at least one GPU type, e.g. --gpu l4,t4")
    unknown = [k for k in keys if k not in catalog and k != LOCAL_GPU]
    if unknown:
        raise UsageError(
            f"unknown GPU type {', '.join(unknown)}; known: {', '.join(catalog)} "
            f"(and {LOCAL_GPU} on the local backend)"
        )
    return keys


def member_config(config: BenchConfig, gpu: GpuType) -> BenchConfig:
    """The settings one sweep member launches with: its shape, and its zones (those of the
    configured zones that offer it, when zones are configured; else the shipped list)."""
    if "zones" in config.model_fields_set:
        zones = [zone for zone in config.zones if zone in gpu.zones]
        if not zones:
            raise UsageError(
                f"{gpu.key} ({gpu.machine_type}) is offered in none of the configured zones "
                f"({', '.join(config.zones)}); it is offered in {', '.join(gpu.zones)}"
            )
    else:
        zones = list(gpu.zones)
    if gpu.spot_only and not config.spot:
        raise UsageError(
            f"{gpu.key}: {gpu.machine_type} is offered only as "
            f"{' or '.join(p.title() for p in gpu.provisioning)} VMs, not on-demand; "
            "set spot = true (bench uses Spot) or leave it out of --gpu"
        )
    update = {
        "machine_type": gpu.machine_type,
        "accelerator_type": gpu.accelerator_type,
        "accelerator_count": gpu.accelerator_count,
        "zones": zones,
        # No on-demand fallback for a shape that has no on-demand.
        "on_demand_fallback": config.on_demand_fallback and not gpu.spot_only,
    }
    return config.model_copy(update=update)


def local_gpu_name() -> str | None:
    """This machine's first GPU as nvidia-smi names it; None without nvidia-smi or a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def key_for_name(gpu_name: str | None, catalog: dict[str, GpuType]) -> str | None:
    """The catalog key of the machine whose GPU kind an nvidia-smi GPU name is ("NVIDIA
    A100-SXM4-40GB" is an a100; "NVIDIA L40S" is no l4): results_schema.gpu_kinds.kind_of,
    as the harness tells its GPU."""
    found = kind_of(gpu_name)
    if found is None:
        return None
    return next((k for k, g in catalog.items() if g.kind.key == found.key), None)


def key_for_accelerator(accelerator_type: str, catalog: dict[str, GpuType]) -> str | None:
    """The catalog key of a GCE accelerator type ("nvidia-l4" is l4)."""
    return next((k for k, g in catalog.items() if g.accelerator_type == accelerator_type), None)


def local_member(keys: list[str], catalog: dict[str, GpuType], gpu_name: str | None) -> str:
    """The local backend runs on this machine's one GPU: `--gpu local`, or the key of that
    GPU. Returns the key recorded for the run (`local` when the GPU is not in the catalog)."""
    found = key_for_name(gpu_name, catalog)
    shown = gpu_name or "no GPU (nvidia-smi found none)"
    if len(keys) != 1 or keys[0] not in (LOCAL_GPU, found):
        raise UsageError(
            f"the local backend runs on this machine's GPU, {shown}: use --gpu {LOCAL_GPU}"
            + (f" or --gpu {found}" if found else "")
            + " (several GPU types need --backend gce)"
        )
    return found or LOCAL_GPU
