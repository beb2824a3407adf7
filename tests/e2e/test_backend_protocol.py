"""The service layer calls nothing a protocol does not declare, and branches on no backend's
name: whole commands run against backends and stores that answer only what their protocol
declares, and against a backend registered under a new name."""

from __future__ import annotations

import pytest

from orchestrator.backends import registry
from orchestrator.backends.base import Backend
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from orchestrator.stores.base import Store
from tests.e2e.test_gce_cli import plan_file
from tests.e2e.test_local_run import small_plan
from tests.unit.test_service_protocols import declared

pytestmark = pytest.mark.timeout(300)


class ProtocolOnly:
    """`inner` as the service sees it: any name its protocol does not declare is an error."""

    def __init__(self, inner, protocol) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_names", declared(protocol))
        object.__setattr__(self, "_protocol", protocol.__name__)

    def __getattr__(self, name: str):
        if name not in self._names:
            raise AttributeError(f"the service used {name!r}, which {self._protocol} lacks")
        return getattr(self._inner, name)


class ProtocolOnlyLocal(LocalBackend):
    @classmethod
    def create(cls, host):
        return ProtocolOnly(LocalBackend.create(host), Backend)

    @classmethod
    def create_store(cls, host):
        return ProtocolOnly(LocalBackend.create_store(host), Store)


class ProtocolOnlyGce(GceBackend):
    @classmethod
    def create(cls, host):
        from orchestrator.stores.gcs import GcsStore

        # Its own bucket calls (doctor, setup) are the backend's, not the service's.
        return ProtocolOnly(GceBackend(host.config, store=GcsStore(host.config)), Backend)

    @classmethod
    def create_store(cls, host):
        return ProtocolOnly(GceBackend.create_store(host), Store)


class Sandbox(LocalBackend):
    """The local backend under another name: what a new backend folder registers."""

    name = "sandbox"


@pytest.fixture
def registered(monkeypatch):
    def register(name: str, cls: type) -> None:
        monkeypatch.setattr(
            registry, "BACKENDS", {**registry.BACKENDS, name: f"{__name__}:{cls.__name__}"}
        )
        registry.backend_class.cache_clear()

    yield register
    registry.backend_class.cache_clear()


def test_a_local_run_needs_only_what_the_protocols_declare(bench_env, tmp_path, capsys, registered):
    registered("local", ProtocolOnlyLocal)
    plan = str(small_plan(tmp_path))
    assert main(["launch", "--backend", "local", "--plan", plan, "--budget", "1", "--wait"]) == 0
    (record,) = RunRegistry(bench_env / "state" / "runs.sqlite").all()
    for command in (
        ["status"],
        ["status", record.run_id, "--json"],
        ["logs", record.run_id],
        ["fetch", record.run_id, "--dest", str(tmp_path / "results")],
        ["clean"],
        ["stop-all", "--yes"],
    ):
        assert main(command) == 0, (command, capsys.readouterr())


def test_a_gce_run_needs_only_what_the_protocols_declare(gce, tmp_path, capsys, registered):
    registered("gce", ProtocolOnlyGce)
    plan = plan_file(tmp_path)
    assert main(["launch", "--backend", "gce", "--plan", plan, "--budget", "1", "--wait"]) == 0
    (record,) = RunRegistry(tmp_path / "state" / "runs.sqlite").all()
    for command in (
        ["status"],
        ["logs", record.run_id],
        ["fetch", record.run_id, "--dest", str(tmp_path / "results")],
        ["render", "--backend", "gce", "--plan", plan],
        ["stop-all", "--yes"],
    ):
        assert main(command) == 0, (command, capsys.readouterr())


def test_a_backend_registered_under_a_new_name_runs_a_plan_end_to_end(
    bench_env, tmp_path, capsys, monkeypatch, registered
):
    registered("sandbox", Sandbox)
    monkeypatch.setenv("BENCH_BACKEND", "sandbox")
    plan = str(small_plan(tmp_path))
    assert main(["launch", "--plan", plan, "--budget", "1", "--wait"]) == 0, capsys.readouterr()
    (record,) = RunRegistry(bench_env / "state" / "runs.sqlite").all()
    assert record.backend == "sandbox"
    assert main(["fetch", record.run_id, "--dest", str(tmp_path / "results")]) == 0
    assert main(["clean"]) == 0
