"""Shared fixtures: an isolated bench environment, and the `gpu` marker's skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The stand-ins' fixtures, for every test that names them.
from tests.fakes.fixtures import compute_server, gcs_bucket, gcs_server  # noqa: F401


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def bench_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and state dir of its own, and no BENCH_* leaking in from outside."""
    for name in list(os.environ):
        if name.startswith("BENCH_"):
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("BENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path
