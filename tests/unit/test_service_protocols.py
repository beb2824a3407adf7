"""Every registered backend (and each store) implements everything its protocol declares,
and declares its rules for the service to read (tests/e2e/test_backend_protocol.py runs the
service against backends that answer nothing else)."""

from __future__ import annotations

import inspect

import pytest

from orchestrator.backends import registry
from orchestrator.backends.base import (
    Backend,
    Capabilities,
    ChecksProject,
    PricesRuns,
    SetsUpProject,
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


@pytest.mark.parametrize("name", registry.names())
def test_each_registered_backend_implements_the_whole_protocol(name):
    cls = registry.backend_class(name)
    assert cls.name == name
    assert isinstance(cls.capabilities, Capabilities)
    init = inspect.getsource(cls.__init__)
    for member in declared(Backend):
        assert hasattr(cls, member) or f"self.{member}" in init, (name, member)


@pytest.mark.parametrize("name", registry.names())
def test_a_backend_prices_its_runs_exactly_when_its_machines_bill(name):
    """The service asks a billed backend for rate, cap and worst case (`PricesRuns`), with
    the signatures the protocol declares; an unbilled one has nothing to price."""
    cls = registry.backend_class(name)
    assert issubclass(cls, PricesRuns) == registry.capabilities(name).billed
    if issubclass(cls, PricesRuns):
        for member in declared(PricesRuns):
            wanted = inspect.signature(getattr(PricesRuns, member)).parameters
            assert inspect.signature(getattr(cls, member)).parameters.keys() == wanted.keys(), (
                name,
                member,
            )


@pytest.mark.parametrize("cls", [LocalStore, GcsStore])
def test_each_store_implements_the_whole_protocol(cls):
    for name in declared(Store) - {"name"}:
        assert hasattr(cls, name), (cls, name)


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
