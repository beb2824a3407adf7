"""The payload: the exact code a run executes, as one reproducible tarball with a sha256.

Built from the working tree (uncommitted edits included) on every launch, so a VM can never
run stale code; identical trees give identical bytes wherever they sit (sorted entries,
relative names, zeroed times/owners/modes). Only what the VM runs goes in: no caches, no
docs, no schema exports; tests and developer tools live outside the payload packages.

Every tree it carries (the harness's packages, each kernel tree) is read by
`kernel_tree.collect.collect_tree`: as git sees it, no link, bounded before it is read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends.registry import capabilities
from orchestrator.kernel_tree.collect import (
    TreeFiles,
    collect_tree,
    package_dir,
    payload_skips,
)
from results_schema import Plan
from results_schema.record import PAYLOAD_PACKAGES, payload_tree_digests

# PAYLOAD_PACKAGES are the harness (the target checks them by that name, results_schema.
# record); kernels travel as trees of their own (`kernel_trees`), ours too.

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
    """The bare-image venv's pins where bench sets up the run's python; in the user's own
    python only the names."""
    pins = PAYLOAD_PIP_PACKAGES[device]
    return pins if _sets_up_python(backend) else [_name(pin) for pin in pins]


def image_requirements(backend: str, device: str) -> list[str]:
    """What an image's own python must carry for the run to install nothing."""
    if device == "cpu" or not _sets_up_python(backend):
        return payload_requirements(backend, device)
    return PAYLOAD_MINIMUMS


def _sets_up_python(backend: str) -> bool:
    return capabilities(backend).sets_up_python


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
    # Each tree's digest (the harness's, each kernel tree's folder's: results_schema.record
    # tree_digest), which the target checks just before it uses the tree.
    tree_sha256s: dict[str, str]

    @property
    def size(self) -> int:
        return len(self.data)


def payload_root() -> Path:
    """The directory holding the payload packages where Python imports them: the checkout,
    or site-packages for an installed wheel."""
    roots = {package_dir(name).parent for name in PAYLOAD_PACKAGES}
    if len(roots) != 1:
        raise RuntimeError(f"the payload packages lie in several places: {sorted(roots)}")
    return roots.pop()


def payload_files(source_root: Path | None = None) -> TreeFiles:
    """(name in the tarball, contents) of every file the VM needs, sorted by name. The
    packages come from `source_root` when given, else from where Python imports them."""
    root = source_root or payload_root()
    label = f"the payload's tree {root}"
    return collect_tree(root, PAYLOAD_PACKAGES, skipped=payload_skips, label=label)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def build_payload(
    plan: Plan,
    source_root: Path | None = None,
    kernel_trees: Sequence[tuple[str, TreeFiles]] = (),
) -> Payload:
    """Tar the payload packages and plan.json; identical inputs give identical bytes.
    Each of `kernel_trees` (a folder, a kernel's tree) goes in as <folder>/..."""
    entries = list(payload_files(source_root))
    for folder, files in kernel_trees:
        entries += [(f"{folder}/{name}", data) for name, data in files]
    plan_json = ("plan.json", plan.model_dump_json(indent=2).encode())
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in [*sorted(entries), plan_json]:
                _add_bytes(tar, name, data)
    data = buffer.getvalue()
    entries.append(plan_json)
    digests = payload_tree_digests((n, hashlib.sha256(d).hexdigest()) for n, d in entries)
    return Payload(data=data, sha256=hashlib.sha256(data).hexdigest(), tree_sha256s=digests)
