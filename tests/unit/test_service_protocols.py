"""The service layer calls nothing a protocol does not declare, and both backends (and both
stores) implement everything their protocol declares."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from orchestrator.backends.base import Backend
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.stores.base import Store
from orchestrator.stores.gcs import GcsStore
from orchestrator.stores.local import LocalStore

SERVICE = Path(__file__).resolve().parents[2] / "orchestrator" / "service"


def declared(protocol) -> set[str]:
    members = {n for n, v in vars(protocol).items() if inspect.isfunction(v)}
    return {n for n in members | set(protocol.__annotations__) if not n.startswith("__")}


def called_on(pattern: str, skip: tuple[str, ...] = ()) -> set[str]:
    """Attribute names the service modules use on what `pattern` matches."""
    found = set()
    for module in SERVICE.glob("*.py"):
        if module.stem in skip:
            continue
        found |= set(re.findall(pattern + r"\.(\w+)", module.read_text()))
    return found


def test_the_service_calls_only_what_the_backend_protocol_declares():
    used = called_on(r"(?:ctx\.backend\([^()]*\)|\bbackend)")
    assert used, "the pattern found no calls: it no longer matches the code"
    assert used <= declared(Backend), used - declared(Backend)


def test_the_service_calls_only_what_the_store_protocol_declares():
    # doctor (and its probe) and setup are use cases of gce alone: they work a GcsStore's
    # bucket itself.
    used = called_on(r"(?:ctx\.store\([^()]*\)|\bstore)", skip=("doctor", "probe", "setup"))
    assert used <= declared(Store), used - declared(Store)


@pytest.mark.parametrize("cls", [LocalBackend, GceBackend])
def test_each_backend_implements_the_whole_protocol(cls):
    instance_attributes = inspect.getsource(cls.__init__)
    for name in declared(Backend):
        assigned = re.search(rf"self\.{name}\b[^=\n]*=", instance_attributes)
        assert hasattr(cls, name) or assigned, (cls, name)


@pytest.mark.parametrize("cls", [LocalStore, GcsStore])
def test_each_store_implements_the_whole_protocol(cls):
    for name in declared(Store) - {"name"}:
        assert hasattr(cls, name), (cls, name)
