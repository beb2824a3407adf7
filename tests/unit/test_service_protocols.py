"""Every registered backend (and each store) implements everything its protocols declare,
each method with the protocol's parameters, and declares its rules for the service to read
(tests/e2e/test_backend_protocol.py runs the service against backends that answer nothing
else)."""

from __future__ import annotations

import inspect

import pytest

from orchestrator.backends import registry
from orchestrator.backends.base import (
    Backend,
    Capabilities,
    ChecksProject,
    GrantsRunAccess,
    PricesRuns,
    ReportsBilledTime,
    SetsUpProject,
    ShowsPriceCatalog,
    SplitsBudget,
)
from orchestrator.config import BenchConfig
from orchestrator.errors import UsageError
from orchestrator.stores.base import Store
from orchestrator.stores.gcs import GcsStore
from orchestrator.stores.local import LocalStore


def declared(protocol) -> set[str]:
    """The names a protocol declares: its methods (class methods too) and attributes."""
    methods = {
        n for n, v in vars(protocol).items() if inspect.isfunction(v) or isinstance(v, classmethod)
    }
    return {n for n in methods | set(protocol.__annotations__) if not n.startswith("_")}


OPTIONAL = (
    PricesRuns,
    ShowsPriceCatalog,
    GrantsRunAccess,
    SplitsBudget,
    ReportsBilledTime,
    ChecksProject,
    SetsUpProject,
)


def parameters(owner, member: str) -> list[tuple]:
    """A method's parameters as the caller meets them: whether it is a class method (the
    service calls those on the class), then each parameter's name, kind and default."""
    method = getattr(owner, member)
    is_classmethod = isinstance(inspect.getattr_static(owner, member), classmethod)
    return [("classmethod", is_classmethod)] + [
        (p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()
    ]


def methods(protocol) -> set[str]:
    return {
        n
        for n, v in vars(protocol).items()
        if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, classmethod))
    }


def mismatched(protocol, cls) -> dict[str, tuple]:
    """Each method of `protocol` that `cls` does not take as declared: the protocol's
    parameters, in its order, of its kinds and defaults. An implementation may take more
    after them, each with a default, since the service never passes one (gce's
    `instance_request_json(zone=)`, GcsStore's `if_absent`)."""
    found = {}
    for member in sorted(methods(protocol)):
        declared_as, implemented_as = parameters(protocol, member), parameters(cls, member)
        extra = implemented_as[len(declared_as) :]
        if implemented_as[: len(declared_as)] != declared_as or any(
            default is inspect.Parameter.empty for _, _, default in extra
        ):
            found[member] = (declared_as, implemented_as)
    return found


@pytest.mark.parametrize("name", registry.names())
def test_each_registered_backend_implements_the_whole_protocol(name):
    cls = registry.backend_class(name)
    assert cls.name == name
    assert isinstance(cls.capabilities, Capabilities)
    init = inspect.getsource(cls.__init__)
    for member in declared(Backend):
        assert hasattr(cls, member) or f"self.{member}" in init, (name, member)
    assert mismatched(Backend, cls) == {}


@pytest.mark.parametrize("name", registry.names())
def test_each_optional_protocol_a_backend_implements_has_the_declared_parameters(name):
    cls = registry.backend_class(name)
    implemented = [protocol for protocol in OPTIONAL if issubclass(cls, protocol)]
    assert implemented or name == "local"
    for protocol in implemented:
        assert mismatched(protocol, cls) == {}, (name, protocol.__name__)


@pytest.mark.parametrize("name", registry.names())
def test_a_backend_prices_its_runs_exactly_when_its_machines_bill(name):
    """The service asks a billed backend for rate, cap and worst case (`PricesRuns`); an
    unbilled one has nothing to price."""
    cls = registry.backend_class(name)
    assert issubclass(cls, PricesRuns) == registry.capabilities(name).billed


@pytest.mark.parametrize("cls", [LocalStore, GcsStore])
def test_each_store_implements_the_whole_protocol(cls):
    for name in declared(Store) - {"name"}:
        assert hasattr(cls, name), (cls, name)
    assert mismatched(Store, cls) == {}


def test_a_changed_parameter_is_seen():
    class Reordered(LocalStore):
        def get_bytes(self, max_bytes=None, key=""):
            return b""

    class Required(LocalStore):
        def download(self, key, path, max_bytes):
            pass

    class Renamed(LocalStore):
        def copy(self, src, target):
            pass

    class ExtraRequired(LocalStore):
        def exists(self, key, generation):
            return False

    class OnTheClass(LocalStore):
        @classmethod
        def require_credentials(cls):
            pass

    assert set(mismatched(Store, Reordered)) == {"get_bytes"}
    assert set(mismatched(Store, Required)) == {"download"}
    assert set(mismatched(Store, Renamed)) == {"copy"}
    assert set(mismatched(Store, ExtraRequired)) == {"exists"}
    assert set(mismatched(Store, OnTheClass)) == {"require_credentials"}
    assert mismatched(Store, LocalStore) == {}


def test_a_backends_default_poll_is_its_declaration_and_the_setting_beats_it():
    assert registry.poll_interval(BenchConfig(), "gce") == registry.capabilities("gce").poll_seconds
    assert (
        registry.poll_interval(BenchConfig(), "local")
        == registry.capabilities("local").poll_seconds
    )
    assert registry.poll_interval(BenchConfig(poll_seconds=3), "local") == 3


def test_auto_picks_a_cloud_only_when_its_settings_name_one():
    assert registry.resolved_backend(BenchConfig())[0] == "local"
    assert registry.resolved_backend(BenchConfig(project="my-project-1")) == (
        "gce",
        "GCP project my-project-1 is configured",
    )
    assert registry.searchable(BenchConfig()) == ["local"]
    assert registry.unsearched(BenchConfig()) == {
        "GCE": "no project configured",
        "Cloud Batch": "no project configured",
    }
    assert registry.searchable(BenchConfig(project="my-project-1")) == ["local", "gce"]


def test_doctor_and_setup_are_offered_only_where_a_backend_implements_them(tmp_path):
    from orchestrator.service.context import Context
    from orchestrator.service.doctor import run_doctor
    from orchestrator.service.setup import plan_setup

    ctx = Context(BenchConfig(state_dir=tmp_path))
    with pytest.raises(UsageError, match="local backend has no project to check"):
        list(run_doctor(ctx, backend="local"))
    with pytest.raises(UsageError, match="local backend has nothing to set up"):
        plan_setup(ctx, backend="local")
    gce = registry.backend_class("gce")
    assert issubclass(gce, ChecksProject) and issubclass(gce, SetsUpProject)


def test_an_unknown_backend_is_a_usage_error_naming_the_choices(tmp_path):
    from orchestrator.service.context import Context

    with pytest.raises(UsageError, match="unknown backend 'azure'; choose one of local, gce"):
        Context(BenchConfig(state_dir=tmp_path)).backend("azure")
