"""The machine table (orchestrator/data/gpus.toml) read into `GpuType`s: a leaf, so that the
settings (orchestrator/config.py: the GPUs a machine type comes with) and the sweep's GPU
list (orchestrator/gpus.py) read one table without importing each other. What a GPU is
(its name's words, arch, peak, bandwidth and their sources) is its kind's row in
results_schema/gpu_kinds.json, which the harness reads too: a machine names its kind."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources

from results_schema.gpu_kinds import GpuKind, kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class GpuType:
    key: str
    kind: GpuKind
    name: str
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    provisioning: tuple[str, ...]
    zones: tuple[str, ...]

    @property
    def spot_only(self) -> bool:
        """Compute Engine offers this shape without on-demand (STANDARD) provisioning."""
        return "STANDARD" not in self.provisioning

    @property
    def arch(self) -> str:
        return self.kind.arch

    @property
    def peak_tflops(self) -> float:
        return self.kind.peak_tflops

    @property
    def peak_tflops_source(self) -> str:
        return self.kind.peak_tflops_source

    @property
    def bandwidth_gb_s(self) -> float:
        return self.kind.bandwidth_gb_s

    @property
    def bandwidth_source(self) -> str:
        return self.kind.bandwidth_source


def load_gpu_catalog() -> dict[str, GpuType]:
    text = resources.files("orchestrator.data").joinpath("gpus.toml").read_text()
    data = tomllib.loads(text)
    return {
        key: GpuType(
            key=key,
            **{
                **entry,
                "kind": kind(entry["kind"]),
                "provisioning": tuple(entry["provisioning"]),
                "zones": tuple(entry["zones"]),
            },
        )
        for key, entry in data["gpus"].items()
    }
