"""What every use case needs: settings, state paths, the registry, backends and stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backends import registry as registered
from orchestrator.config import BenchConfig
from orchestrator.paths import StatePaths, state_paths
from orchestrator.registry import RunRegistry

if TYPE_CHECKING:
    from orchestrator.backends.base import Backend, Capabilities, PricesRuns
    from orchestrator.stores.base import Store


@dataclass
class Context:
    config: BenchConfig
    _backends: dict[str, Backend] = field(default_factory=dict)
    _stores: dict[str, Store] = field(default_factory=dict)

    @cached_property
    def paths(self) -> StatePaths:
        return state_paths(self.config)

    @cached_property
    def registry(self) -> RunRegistry:
        return RunRegistry(self.paths.registry, billed_backends=registered.billed())

    def backend(self, name: str) -> Backend:
        """The backend `name`, made once (UsageError: unknown, or its settings missing)."""
        if name not in self._backends:
            self._backends[name] = registered.backend_class(name).create(self)
        return self._backends[name]

    def store(self, name: str) -> Store:
        """The store the runs of backend `name` write to."""
        if name not in self._stores:
            self._stores[name] = registered.backend_class(name).create_store(self)
        return self._stores[name]

    def capabilities(self, name: str) -> Capabilities:
        return registered.capabilities(name)

    def pricing(self, name: str) -> PricesRuns:
        """How backend `name` prices its runs: its class, when its machines bill."""
        return registered.backend_class(name)

    def resolved_backend(self) -> tuple[str, str]:
        """The backend these settings choose, and why (launch says it)."""
        return registered.resolved_backend(self.config)

    def poll_interval(self, name: str) -> float:
        """Seconds between two looks at a run on backend `name`."""
        return registered.poll_interval(self.config, name)

    def require_settings(self, name: str) -> None:
        """UsageError naming what backend `name` needs and these settings lack."""
        registered.backend_class(name).require_settings(self.config)

    def local_store_root(self) -> Path:
        return self.paths.store / self.config.prefix
