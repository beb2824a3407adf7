"""Where bench keeps its local state: the run registry, the local store and sandboxes."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def registry(self) -> Path:
        return self.root / "runs.sqlite"

    @property
    def store(self) -> Path:
        return self.root / "store"

    def sandbox(self, run_id: str) -> Path:
        return self.root / "sandboxes" / run_id


def state_paths(config: BenchConfig) -> StatePaths:
    from platformdirs import user_state_dir

    return StatePaths(Path(config.state_dir or user_state_dir("bench")).expanduser())


def ensure_writable(paths: StatePaths) -> None:
    """Fail early (exit 2) rather than half-way through a launch."""
    root = paths.root
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(
            f"state dir {root} is not writable ({e.strerror}); set state_dir in bench.toml "
            "or BENCH_STATE_DIR to a writable directory"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"state dir {root} is not writable; set BENCH_STATE_DIR")
