"""The backends of names.py, as classes: each imported when first asked for, so naming the
choices (`--help`) imports none of them; what `auto` stands for; where `stop-all` looks.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from orchestrator.backends import names as table
from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from orchestrator.backends.base import Backend, Capabilities
    from orchestrator.config import BenchConfig

# `backend = "auto"` when no backend's settings select it (`chosen_by_auto`).
AUTO_FALLBACK = "local"
AUTO_FALLBACK_REASON = "no GCP project is configured (set `project` in bench.toml to use GCE)"


def names() -> tuple[str, ...]:
    return tuple(table.BACKENDS)


@cache
def backend_class(name: str) -> type[Backend]:
    if name not in table.BACKENDS:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(table.BACKENDS)}")
    module, _, cls = table.BACKENDS[name].partition(":")
    return getattr(import_module(module), cls)


def capabilities(name: str) -> Capabilities:
    return backend_class(name).capabilities


def auto_backend(config: BenchConfig) -> tuple[str, str]:
    """The backend `auto` stands for with these settings, and why."""
    for name in table.BACKENDS:
        reason = backend_class(name).chosen_by_auto(config)
        if reason:
            return name, reason
    return AUTO_FALLBACK, AUTO_FALLBACK_REASON


def resolved_backend(config: BenchConfig) -> tuple[str, str]:
    """The backend to use with these settings and why, so launch can say it."""
    if config.backend != "auto":
        return config.backend, "chosen by configuration or --backend"
    return auto_backend(config)


def poll_interval(config: BenchConfig, backend: str) -> float:
    """Seconds between two looks at a run on `backend`: the setting, else its default."""
    return config.poll_seconds or capabilities(backend).poll_seconds


def billed() -> tuple[str, ...]:
    """The backends whose runs bill, and so count against the monthly cap."""
    return tuple(name for name in table.BACKENDS if capabilities(name).billed)


def searchable(config: BenchConfig) -> list[str]:
    """The backends `stop-all` looks in with these settings (local always)."""
    return [
        name for name in table.BACKENDS if backend_class(name).unsearched_reason(config) is None
    ]


def unsearched(config: BenchConfig) -> dict[str, str]:
    """Title -> why not searched, for each backend `searchable` leaves out."""
    found = {}
    for name in table.BACKENDS:
        reason = backend_class(name).unsearched_reason(config)
        if reason is not None:
            found[capabilities(name).title] = reason
    return found


def default_cloud() -> str:
    """The backend `bench doctor`, `bench setup` and `bench prices` speak of: the first
    registered one whose machines bill."""
    return next(name for name in table.BACKENDS if capabilities(name).billed)
