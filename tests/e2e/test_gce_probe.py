"""`bench doctor --probe` end to end on the stand-ins: a real e2-micro spot VM of the compute
stand-in runs the rendered probe script as the VM account (its token, its bucket grants, its
conditional self-delete binding, all evaluated), writes its object and deletes itself;
doctor reports each step and leaves nothing behind, or deletes what is left and says so."""

from __future__ import annotations

import base64
import json
import os
import re

import pytest

from orchestrator.backends.gce import probe_run
from orchestrator.backends.gce.iam import SELF_DELETE_ROLE_ID
from orchestrator.backends.gce.probe import ProbeRun, render_probe_script
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from tests.e2e.test_gce_doctor import project  # noqa: F401 - fixture
from tests.e2e.test_gce_setup import ACCOUNT, PROJECT, iam  # noqa: F401 - fixture
from tests.unit.test_render import shellcheck

pytestmark = pytest.mark.timeout(120)


def _lines(capsys, prefix: str = "") -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(prefix)]


def _bucket_objects(gcs_server) -> list[str]:
    return [b.name for b in gcs_server.client().list_blobs(os.environ["BENCH_BUCKET"])]


def test_the_probe_vm_writes_its_object_deletes_itself_and_leaves_nothing(
    project,  # noqa: F811
    gcs_server,
    capsys,
):
    assert main(["doctor", "--probe"]) == 0
    lines = _lines(capsys)
    probe = [line for line in lines if "probe" in line]
    assert [line.split(": ")[0] for line in probe] == [
        "✓ probe VM created",
        "✓ probe object seen",
        "✓ probe VM gone",
        "✓ probe leftovers",
    ]
    assert "(e2-micro, spot, no GPU" in probe[0] and " at " in probe[1]
    assert "deleted itself, disk included" in probe[2]
    assert probe[3].endswith("none: the probe VM, its disk and its object are gone")

    (sent,) = project.inserted
    assert sent["machineType"].endswith("/machineTypes/e2-micro")
    assert "guestAccelerators" not in sent
    scheduling = sent["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["maxRunDuration"] == {"seconds": "600"}
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert sent["serviceAccounts"][0]["email"] == ACCOUNT
    (delete,) = project.calls("instances.delete")
    assert delete.caller == f"vm:{sent['name']}"  # the VM itself, through its condition
    assert project.instances() == []
    assert _bucket_objects(gcs_server) == []
    assert project.proxy.denied == []


def test_a_probe_vm_that_may_not_delete_itself_is_deleted_by_doctor_and_said_so(
    project,  # noqa: F811
    capsys,
    monkeypatch,
):
    """The binding gone after doctor's own check passed (run_probe, not gated): the VM writes
    its object, its delete is refused (403), it powers off; doctor waits its bound, says
    which step failed, and deletes the VM and the object itself."""
    monkeypatch.setattr(probe_run, "GONE_TIMEOUT_SECONDS", 2.0)
    policy = project.iam_server.policy(PROJECT)
    policy["bindings"] = [
        b for b in policy["bindings"] if not b["role"].endswith(SELF_DELETE_ROLE_ID)
    ]
    checks = _run_probe()
    assert [(c.name, c.ok) for c in checks] == [
        ("probe VM created", True),
        ("probe object seen", True),
        ("probe VM gone", False),
        ("probe leftovers", True),
    ]
    assert "its own delete was refused" in checks[2].detail
    assert "doctor deleted bench-" in checks[3].detail
    assert project.instances() == []
    (refused, by_doctor) = project.calls("instances.delete")
    assert refused.caller.startswith("vm:") and by_doctor.caller == "controller"


def test_a_probe_vm_without_bucket_access_says_where_it_stopped(
    project,  # noqa: F811
    capsys,
    monkeypatch,
):
    monkeypatch.setattr(probe_run, "OBJECT_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(probe_run, "GONE_TIMEOUT_SECONDS", 0.5)
    project.proxy.bindings.clear()
    checks = _run_probe()
    assert [(c.name, c.ok) for c in checks][:2] == [
        ("probe VM created", True),
        ("probe object seen", False),
    ]
    assert "upload of runs/" in checks[1].detail  # the VM's console, as doctor read it
    assert checks[-1].ok and project.instances() == []


def test_doctor_does_not_start_the_probe_when_what_it_needs_is_missing(
    project,  # noqa: F811
    capsys,
    monkeypatch,
):
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", "default")
    assert main(["doctor", "--probe"]) == 4
    (line,) = _lines(capsys, "✗ probe")
    # The default account holds no role on runs/ (its runs' grants are signed as
    # bench-signer), so the bucket check passes; it may not delete its VM, so no probe.
    assert "not started" in line and "a VM account that may delete itself" in line
    assert "VM bucket access" not in line
    assert project.inserted == []


def _run_probe() -> list:
    """The probe alone, as `doctor --probe` runs it once its own checks passed."""
    from orchestrator.cli.options import make_context

    gce = make_context(backend="gce").backend("gce")
    return list(probe_run.run_probe(gce.config, gce.api, gce.store, gce.poll_seconds))


def test_the_probe_script_is_shellcheck_clean_and_quotes_its_values(iam_credentials):
    from orchestrator.stores.gcs import GcsStore

    config = BenchConfig(
        project="my-project-1",
        bucket="my-bucket",
        prefix="team/bench",
        storage_endpoint="http://127.0.0.1:9",  # signing sends nothing to storage
        iamcredentials_endpoint=iam_credentials.sign_for("my-project-1"),
    )
    probe = ProbeRun("20261101-120000-abcdef")
    script = render_probe_script(config, probe, GcsStore(config))
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout
    assert "readonly PROBE_KEY=runs/20261101-120000-abcdef/probe.txt" in script
    # Its upload grant, for its own key only: the POST policy's key condition.
    policy = re.search(r"readonly RUN_UPLOAD_FIELD_policy=(\S+)", script)[1].strip("'")
    conditions = json.loads(base64.b64decode(policy))["conditions"]
    assert ["starts-with", "$key", "team/bench/runs/20261101-120000-abcdef/"] in conditions
    assert "readonly SELF_DELETE=true" in script
