"""Every backend bench knows: the one place a backend is registered.

A backend is one folder (or module) of orchestrator/backends/ whose class implements the
Backend protocol (base.py); one line below makes it a `--backend` choice. Classes are
imported when first asked for, so naming the choices (`--help`) imports none of them.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from orchestrator.backends.base import Backend, Capabilities
    from orchestrator.config import BenchConfig

# name -> "module:class", in the order `--backend` lists them.
BACKENDS = {
    "local": "orchestrator.backends.local:LocalBackend",
    "gce": "orchestrator.backends.gce.backend:GceBackend",
    "batch": "orchestrator.backends.batch.backend:BatchBackend",
}
# `backend = "auto"` when no backend's settings select it (`chosen_by_auto`).
AUTO_FALLBACK = "local"
AUTO_FALLBACK_REASON = "no GCP project is configured (set `project` in bench.toml to use GCE)"


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


@cache
def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(import_module(module), cls)


def capabilities(name: str) -> Capabilities:
    return backend_class(name).capabilities


def auto_backend(config: BenchConfig) -> tuple[str, str]:
    """The backend `auto` stands for with these settings, and why."""
    for name in BACKENDS:
        reason = backend_class(name).chosen_by_auto(config)
        if reason:
            return name, reason
    return AUTO_FALLBACK, AUTO_FALLBACK_REASON


def searchable(config: BenchConfig) -> list[str]:
    """The backends `stop-all` looks in with these settings (local always)."""
    return [name for name in BACKENDS if backend_class(name).unsearched_reason(config) is None]


def unsearched(config: BenchConfig) -> dict[str, str]:
    """Title -> why not searched, for each backend `searchable` leaves out."""
    found = {}
    for name in BACKENDS:
        reason = backend_class(name).unsearched_reason(config)
        if reason is not None:
            found[capabilities(name).title] = reason
    return found


def default_cloud() -> str:
    """The backend `bench doctor`, `bench setup` and `bench prices` speak of: the first
    registered one whose machines bill."""
    return next(name for name in BACKENDS if capabilities(name).billed)
