"""The GPU table (orchestrator/data/gpus.toml) read into `GpuType`s: a leaf, so that the
settings (orchestrator/config.py: the GPUs a machine type comes with) and the sweep's GPU
list (orchestrator/gpus.py) read one table without importing each other."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class GpuType:
    key: str
    name: str
    name_match: str  # how nvidia-smi's GPU name shows this type
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    arch: str
    provisioning: tuple[str, ...]
    zones: tuple[str, ...]
    peak_tflops: float
    peak_tflops_source: str
    bandwidth_gb_s: float
    bandwidth_source: str

    @property
    def spot_only(self) -> bool:
        """Compute Engine offers this shape without on-demand (STANDARD) provisioning."""
        return "STANDARD" not in self.provisioning


def load_gpu_catalog() -> dict[str, GpuType]:
    text = resources.files("orchestrator.data").joinpath("gpus.toml").read_text()
    data = tomllib.loads(text)
    return {
        key: GpuType(
            key=key,
            **{
                **entry,
                "provisioning": tuple(entry["provisioning"]),
                "zones": tuple(entry["zones"]),
            },
        )
        for key, entry in data["gpus"].items()
    }
