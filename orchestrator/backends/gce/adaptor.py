"""The one way in to Google's client libraries (as SkyPilot's sky/adaptors/gcp.py).

Each name below is a module imported on first use, not at import: compute_v1 alone costs
about 2 s, and `bench --help` (or a local run) must import none of them. Every other
module does `from orchestrator.backends.gce.adaptor import compute_v1` (or the name it
needs) and uses it as the module itself, exception types included.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any


class LazyModule:
    """A module that is imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name}, {state}>"


compute_v1 = LazyModule("google.cloud.compute_v1")
storage = LazyModule("google.cloud.storage")
storage_retry = LazyModule("google.cloud.storage.retry")
api_exceptions = LazyModule("google.api_core.exceptions")
api_retry = LazyModule("google.api_core.retry")
client_options = LazyModule("google.api_core.client_options")
auth = LazyModule("google.auth")
auth_exceptions = LazyModule("google.auth.exceptions")
auth_credentials = LazyModule("google.auth.credentials")
auth_requests = LazyModule("google.auth.transport.requests")
json_format = LazyModule("google.protobuf.json_format")


def message_to_dict(message: Any) -> dict[str, Any]:
    """A compute_v1 message as its REST JSON, a plain dict."""
    return json_format.MessageToDict(type(message).pb(message))


def message_to_json(message: Any) -> str:
    """A compute_v1 message as the REST transport serializes it (no empty defaults)."""
    return json_format.MessageToJson(type(message).pb(message), indent=2)
