"""The service layer calls nothing a protocol does not declare, and branches on no backend's
name: whole commands run against backends and stores that answer only what their protocol
declares, and against a backend registered under a new name."""

from __future__ import annotations

import time

import pytest

from orchestrator.backends import base, names, registry
from orchestrator.backends.base import Backend
from orchestrator.backends.gce import builder, compute, pricing
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from orchestrator.registry import RunRegistry
from orchestrator.stores.base import Store
from results_schema import Manifest
from tests.e2e.test_ab import AB_FLAGS, assert_compared_and_reported_first
from tests.e2e.test_gce_cli import (
    bucket_objects,
    discovery_valid,
    image_gb,
    launched_run_id,
    plan_file,
    run_key_of,
)
from tests.e2e.test_gce_scopes import (  # noqa: F401 - bucket_with_iam: the fixture
    READ_ONLY,
    assert_the_vms_token_reads_only_and_its_signed_grants_uploaded,
    bucket_with_iam,
)
from tests.e2e.test_local_run import small_plan
from tests.unit.test_service_protocols import declared

pytestmark = pytest.mark.timeout(300)


# The optional protocols a backend may implement (GrantsRunAccess, SplitsBudget, ...): the
# service asks `isinstance(backend, P)` and then calls what P declares.
OPTIONAL_PROTOCOLS = [
    v for v in vars(base).values() if isinstance(v, type) and getattr(v, "_is_runtime_protocol", 0)
]


class ProtocolOnly:
    """`inner` as the service sees it: any name neither its protocol nor an optional protocol
    it implements declares is an error."""

    def __init__(self, inner, protocol) -> None:
        names = declared(protocol)
        optional = [p for p in OPTIONAL_PROTOCOLS if isinstance(inner, p)]
        for implemented in optional:
            names |= declared(implemented)
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_protocol", " + ".join(p.__name__ for p in [protocol, *optional]))

    def __getattr__(self, name: str):
        if name not in self._names:
            raise AttributeError(f"the service used {name!r}, which {self._protocol} lacks")
        return getattr(self._inner, name)


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
    """The local backend under another name (what a new backend folder registers), which
    answers the service only what its protocols declare."""

    name = "sandbox"

    @classmethod
    def create(cls, host):
        return ProtocolOnly(super().create(host), Backend)

    @classmethod
    def create_store(cls, host):
        return ProtocolOnly(super().create_store(host), Store)


@pytest.fixture
def registered(monkeypatch):
    def register(name: str, cls: type) -> None:
        monkeypatch.setattr(
            names, "BACKENDS", {**names.BACKENDS, name: f"{__name__}:{cls.__name__}"}
        )
        registry.backend_class.cache_clear()

    yield register
    registry.backend_class.cache_clear()


def test_a_gce_run_launched_waited_and_fetched_needs_only_what_the_protocols_declare(
    gce,
    gcs_server,
    gcs_bucket,
    bucket_with_iam,  # noqa: F811 - the fixture
    tmp_path,
    capsys,
    monkeypatch,
    registered,
):
    """The whole gce run of an A/B launch: launch --wait, fetch, report, nothing left,
    through a backend and a store that answer only what their protocols declare, its VM
    uploading through the bucket's IAM and scopes (tests/e2e/test_gce_scopes.py's stand-in)
    with the scopes bench asks for. One run for the five (test_ab.py's gce half, and
    test_gce_scopes.py's run): a gce run is ~7 s of CPU."""
    registered("gce", ProtocolOnlyGce)
    # Scaled 1:60: the insert operation finishes after 90 s and each wait is held up to its
    # 2 minutes; the client's read timeout is 150 s (a 60 s one made this fail before).
    gce.config.time_scale = 60.0
    gce.config.provisioning_s = 90 / 60
    gce.config.operation_wait_s = 120 / 60
    monkeypatch.setattr(compute, "OPERATION_WAIT_HTTP_TIMEOUT_SECONDS", 150 / 60)
    plan = plan_file(tmp_path)
    started = time.monotonic()
    launch = ["launch", "--backend", "gce", "--plan", plan, "--budget", "1.00", *AB_FLAGS]
    assert main([*launch, "--wait"]) == 0, capsys.readouterr()
    assert time.monotonic() - started >= 90 / 60
    run_id = launched_run_id(capsys)
    (insert,) = gce.calls("instances.insert")
    assert insert.query["requestId"]
    (sent,) = gce.inserted
    assert sent["serviceAccounts"][0]["scopes"] == [builder.STORAGE_SCOPE] == [READ_ONLY]
    assert bucket_with_iam.denied == []
    assert main(["fetch", run_id, "--dest", str(tmp_path / "results")]) == 0
    assert "every sha256 verified" in capsys.readouterr().out
    manifest = Manifest.model_validate_json(
        (tmp_path / "results" / run_id / "manifest.json").read_text()
    )
    assert manifest.status == "complete"
    assert_compared_and_reported_first(run_id, tmp_path / "results", capsys, monkeypatch)
    assert manifest.environment.zone == "us-central1-a"
    assert manifest.cost.rate_usd_per_hour == pytest.approx(
        pricing.hourly_rate(BenchConfig(), True, disk_gb=image_gb(gce)).total
    )
    assert gce.instances() == [], "the end of --wait deletes the powered-off instance"
    deletes = gce.calls("instances.delete")
    assert [d.caller for d in deletes] == ["controller"]  # the default account may not
    assert f"bench/{run_key_of(run_id)}/logs/startup.log" in bucket_objects(gcs_server, gcs_bucket)
    assert all(discovery_valid(body) for body in gce.inserted)

    (record,) = RunRegistry(tmp_path / "state" / "runs.sqlite").all()
    for command in (
        ["status"],
        ["logs", record.run_id],
        ["fetch", record.run_id, "--dest", str(tmp_path / "results")],
        ["render", "--backend", "gce", "--plan", plan],
        ["stop-all", "--yes"],
    ):
        assert main(command) == 0, (command, capsys.readouterr())
    assert_the_vms_token_reads_only_and_its_signed_grants_uploaded(
        gce, gcs_server, gcs_bucket, bucket_with_iam, run_id
    )


def test_a_backend_registered_under_a_new_name_runs_a_plan_end_to_end_through_its_protocols(
    bench_env, tmp_path, capsys, monkeypatch, registered
):
    """The local backend as a new one: one run (a launch is ~6 s of CPU) shows both that the
    service branches on no backend's name and that it calls only what the protocols declare."""
    registered("sandbox", Sandbox)
    monkeypatch.setenv("BENCH_BACKEND", "sandbox")
    plan = str(small_plan(tmp_path))
    assert main(["launch", "--plan", plan, "--budget", "1", "--wait"]) == 0, capsys.readouterr()
    (record,) = RunRegistry(bench_env / "state" / "runs.sqlite").all()
    assert record.backend == "sandbox"
    for command in (
        ["status"],
        ["status", record.run_id, "--json"],
        ["logs", record.run_id],
        ["fetch", record.run_id, "--dest", str(tmp_path / "results")],
        ["clean"],
        ["stop-all", "--yes"],
    ):
        assert main(command) == 0, (command, capsys.readouterr())
