"""What every use case needs: settings, state paths, the registry, backends and stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from orchestrator.config import BenchConfig
from orchestrator.errors import UsageError
from orchestrator.paths import StatePaths, state_paths
from orchestrator.registry import RunRegistry

BACKENDS = ("local", "gce")


@dataclass
class Context:
    config: BenchConfig
    _backends: dict = field(default_factory=dict)
    _stores: dict = field(default_factory=dict)

    @cached_property
    def paths(self) -> StatePaths:
        return state_paths(self.config)

    @cached_property
    def registry(self) -> RunRegistry:
        return RunRegistry(self.paths.registry)

    def backend(self, name: str):
        if name not in self._backends:
            self._backends[name] = self._make_backend(name)
        return self._backends[name]

    def store(self, name: str):
        if name not in self._stores:
            self._stores[name] = self._make_store(name)
        return self._stores[name]

    def local_store_root(self):
        return self.paths.store / self.config.prefix

    def _make_backend(self, name: str):
        if name == "local":
            from orchestrator.backends.local import LocalBackend

            return LocalBackend(
                self.paths, self.registry, self.config.payload_python, self.local_store_root()
            )
        if name == "gce":
            require_gce_settings(self.config)
            from orchestrator.backends.gce.backend import GceBackend

            return GceBackend(self.config)
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")

    def _make_store(self, name: str):
        if name == "local":
            from orchestrator.stores.local import LocalStore

            return LocalStore(self.local_store_root())
        if name == "gce":
            require_gce_settings(self.config)
            from orchestrator.stores.gcs import GcsStore

            return GcsStore(self.config)
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def require_gce_settings(config: BenchConfig) -> None:
    missing = [key for key in ("project", "bucket") if getattr(config, key) is None]
    if missing:
        raise UsageError(
            f"the gce backend needs {' and '.join(missing)}: set "
            f"{'them' if len(missing) > 1 else 'it'} in bench.toml "
            f'(e.g. project = "my-project", bucket = "my-bench-results") or as '
            + " / ".join(f"BENCH_{k.upper()}" for k in missing)
        )
