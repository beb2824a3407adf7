"""The payload: the exact code a run executes, as one reproducible tarball with a sha256.

Built from the working tree (uncommitted edits included) on every launch, so a VM can never
run stale code; identical trees give identical bytes wherever they sit (sorted entries,
relative names, zeroed times/owners/modes). Only what the VM runs goes in: no caches, no
docs, no schema exports; tests and developer tools live outside the payload packages.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import util
from pathlib import Path

from results_schema import Plan

PAYLOAD_PACKAGES = ("benches", "kernels", "results_schema")
BASELINE_DIR = "baseline"  # an A/B baseline's kernels/ tree: baseline/kernels/...
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "build", ".mypy_cache"}
SKIPPED_SUFFIXES = {".pyc", ".pyo", ".so", ".o", ".md"}
# Controller-side parts of the shared package: the JSON Schema export and its output.
SKIPPED_PATHS = {"results_schema/jsonschema", "results_schema/export.py"}

# What the payload's python must carry; any image python that has these at these versions
# or newer runs the payload as it is (a Deep Learning VM PyTorch image). The same floors as
# pyproject.toml's `vm` extra, plus pydantic for results_schema.
PAYLOAD_MINIMUMS = ["torch>=2.4", "numpy>=1.24", "pydantic>=2.6", "nvidia-ml-py>=12"]
# Installed into a venv on a bare CUDA image (no torch): exact pins, so every such run
# measures the same stack; they match PAYLOAD_PIP_INDEX_ARGS' CUDA 12.8 wheels.
PAYLOAD_PIP_PACKAGES = {
    "cuda": ["torch==2.8.0", "numpy==2.2.6", "pydantic==2.12.5", "nvidia-ml-py==13.580.82"],
    "cpu": ["torch", "numpy", "pydantic"],  # the smoke plan: any versions will do
}


def payload_requirements(backend: str, device: str) -> list[str]:
    """The bare-image venv's pins (gce); on the user's own machine only the names."""
    pins = PAYLOAD_PIP_PACKAGES[device]
    return pins if backend == "gce" else [_name(pin) for pin in pins]


def image_requirements(backend: str, device: str) -> list[str]:
    """What an image's own python must carry for the run to install nothing."""
    if device == "cpu" or backend != "gce":
        return payload_requirements(backend, device)
    return PAYLOAD_MINIMUMS


def _name(requirement: str) -> str:
    return requirement.split("==")[0].split(">=")[0]


PAYLOAD_PIP_INDEX_ARGS = {
    "cuda": "--extra-index-url https://download.pytorch.org/whl/cu128",
    "cpu": "--extra-index-url https://download.pytorch.org/whl/cpu",
}


@dataclass(frozen=True)
class Payload:
    data: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def package_dir(name: str) -> Path:
    spec = util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"payload package {name} is not importable")
    return Path(next(iter(spec.submodule_search_locations)))


def _skipped(name: str, relative: Path) -> bool:
    inside = f"{name}/{relative.as_posix()}"
    return (
        bool(SKIPPED_DIRS.intersection(relative.parts))
        or relative.suffix in SKIPPED_SUFFIXES
        or any(inside == p or inside.startswith(p + "/") for p in SKIPPED_PATHS)
    )


def payload_files(source_root: Path | None = None) -> list[tuple[str, Path]]:
    """(name in the tarball, file) for every file the VM needs, sorted by name. The packages
    come from `source_root` when given, else from where Python imports them."""
    files = []
    for name in PAYLOAD_PACKAGES:
        root = source_root / name if source_root else package_dir(name)
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not _skipped(name, relative):
                files.append((f"{name}/{relative.as_posix()}", path))
    return sorted(files)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def skipped_in_kernels(relative: Path) -> bool:
    """The payload's rule for a file of a kernels/ tree (an A/B baseline's too)."""
    return _skipped("kernels", relative)


def build_payload(
    plan: Plan,
    source_root: Path | None = None,
    baseline_files: Sequence[tuple[str, bytes]] = (),
) -> Payload:
    """Tar the payload packages and plan.json; identical inputs give identical bytes.
    `baseline_files` (names relative to a kernels/ tree) go in as baseline/kernels/..."""
    entries = [(name, path.read_bytes()) for name, path in payload_files(source_root)]
    entries += [(f"{BASELINE_DIR}/kernels/{name}", data) for name, data in baseline_files]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in sorted(entries):
                _add_bytes(tar, name, data)
            _add_bytes(tar, "plan.json", plan.model_dump_json(indent=2).encode())
    data = buffer.getvalue()
    return Payload(data=data, sha256=hashlib.sha256(data).hexdigest())
