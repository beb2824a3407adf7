"""The payload: the exact code a run executes, as one reproducible tarball with a sha256.

Built from the working tree (uncommitted edits included) on every launch, so a VM can never
run stale code; identical trees give identical bytes (sorted entries, zeroed times/owners).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass
from importlib import util
from pathlib import Path

from results_schema import Plan

PAYLOAD_PACKAGES = ("benches", "kernels", "results_schema")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "build", ".mypy_cache"}
SKIPPED_SUFFIXES = {".pyc", ".pyo", ".so", ".o"}

# What the payload's python must have. On a VM the environment phase installs these pins into
# a venv when the image lacks them (they match the Deep Learning VM image's CUDA 12.8); on the
# user's own machine any installed version will do, so only the names are checked there.
PAYLOAD_PIP_PACKAGES = {
    "cuda": ["torch==2.8.0", "numpy==2.2.6", "pydantic==2.12.5", "nvidia-ml-py==13.580.82"],
    "cpu": ["torch", "numpy", "pydantic"],  # the smoke plan: any versions will do
}


def payload_requirements(backend: str, device: str) -> list[str]:
    pins = PAYLOAD_PIP_PACKAGES[device]
    return pins if backend == "gce" else [pin.split("==")[0] for pin in pins]


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


def _payload_files() -> list[tuple[str, Path]]:
    files = []
    for name in PAYLOAD_PACKAGES:
        root = package_dir(name)
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if not path.is_file() or SKIPPED_DIRS.intersection(relative.parts):
                continue
            if path.suffix in SKIPPED_SUFFIXES:
                continue
            files.append((f"{name}/{relative.as_posix()}", path))
    return files


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def build_payload(plan: Plan) -> Payload:
    """Tar the payload packages and plan.json; deterministic for identical inputs."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, path in _payload_files():
                _add_bytes(tar, name, path.read_bytes())
            _add_bytes(tar, "plan.json", plan.model_dump_json(indent=2).encode())
    data = buffer.getvalue()
    return Payload(data=data, sha256=hashlib.sha256(data).hexdigest())
