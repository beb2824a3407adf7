"""The gce backend partial's shell functions, run by bash against the stand-ins.

store_put/store_get talk to the real fake-gcs-server behind the bucket's IAM proxy, as a run's
VM does: its own objects (RUN_KEY, runs/r1) through the grants launch signs for the run
(backends/gce/signing.py, signed by the IAM stand-in's signBlob and verified by the proxy),
cache/ with a token from the metadata stand-in; `shutdown` is a stub that records its
arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.backends.gce.iam import objects_condition
from orchestrator.backends.gce.script_vars import template_vars
from orchestrator.backends.gce.signing import grant_run_access, signer_email
from orchestrator.config import BenchConfig
from orchestrator.render import template_environment
from orchestrator.stores.gcs import GcsStore
from tests.fakes.compute_server import FakeComputeServer
from tests.fakes.compute_state import project_number
from tests.fakes.fixtures import gcs_bucket, gcs_server  # noqa: F401 - fixtures
from tests.fakes.gcs_proxy import GcsIamProxy
from tests.limits import HANG_SECONDS
from tests.unit.test_gce_builder import make_spec
from tests.unit.test_gce_compute import instance_for

ZONE, NAME = "us-central1-a", "bench-20261101-120000-abcdef"
PROJECT = "bench-test-project"


RUN_KEY = "runs/r1"


@pytest.fixture
def vm(tmp_path, gcs_server, gcs_bucket, iam_credentials):  # noqa: F811
    """Runs bash snippets with the rendered partial sourced, as a phase would, holding the
    grants launch would sign for run r1 (RUN_KEY)."""
    with (
        FakeComputeServer(run_scripts=False) as compute,
        GcsIamProxy(
            gcs_server.endpoint, compute.identity_of_token, public_key_of=iam_credentials.public_key
        ) as proxy,
    ):
        compute.catalog.raise_gpu_quotas()  # a new project has none
        config = BenchConfig(
            project=PROJECT,
            zones=[ZONE],
            bucket=gcs_bucket,
            prefix="team/bench",
            compute_endpoint=compute.endpoint,
            storage_endpoint=proxy.endpoint,
            iamcredentials_endpoint=iam_credentials.sign_for(PROJECT),
            metadata_endpoint=None,
        )
        # As `bench setup` leaves the bucket: the signer on runs/, the VM's account on cache/.
        proxy.grant(f"serviceAccount:{signer_email(config)}", condition=_under(config, "runs"))
        proxy.grant(
            f"serviceAccount:{project_number(PROJECT)}-compute@developer.gserviceaccount.com",
            "roles/storage.objectViewer",
            condition=_under(config, "cache"),
        )
        ComputeApi(config).insert(ZONE, instance_for(compute, ZONE))
        variables = {
            **template_vars(config),
            **grant_run_access(config, GcsStore(config), RUN_KEY, 600).template_vars(),
        }
        variables["metadata_endpoint"] = compute.metadata_url_for(ZONE, NAME)
        partial = template_environment().get_template("partials/backend/gce.sh.j2")
        (tmp_path / "backend.sh").write_text(partial.render(**variables))
        stubs = tmp_path / "bin"
        stubs.mkdir()
        (stubs / "shutdown").write_text('#!/bin/bash\necho "$@" >> "$WORK_DIR/shutdown.args"\n')
        (stubs / "sync").write_text("#!/bin/bash\n")
        (stubs / "sleep").write_text('#!/bin/bash\necho "$@" >> "$WORK_DIR/sleep.args"\n')
        for stub in stubs.iterdir():
            stub.chmod(0o755)

        def run(snippet: str) -> subprocess.CompletedProcess:
            script = (
                "set -Eeuo pipefail\n"
                'log() { echo "[log] $*"; }\n'
                f"readonly RUN_KEY={RUN_KEY}\nexport RUN_KEY\n"
                f"export WORK_DIR={tmp_path}\n"
                f"export PATH={stubs}:$PATH\n"
                f"source {tmp_path / 'backend.sh'}\n"
                # Like common.sh.j2 and run_phase: exported, then called in a child bash.
                "export -f log store_put store_get machine_facts stop_machine machine_watchdog\n"
                f"bash -Eeuo pipefail -c {snippet!r}\n"
            )
            return subprocess.run(
                ["bash", "-c", script],
                capture_output=True,
                text=True,
                check=False,
                cwd=tmp_path,
                timeout=HANG_SECONDS,
            )

        run.tmp_path = tmp_path  # type: ignore[attr-defined]
        run.compute = compute  # type: ignore[attr-defined]
        run.proxy = proxy  # type: ignore[attr-defined]
        yield run


def _under(config: BenchConfig, folder: str) -> dict[str, str]:
    expression = objects_condition(config.bucket, config.prefix, folder)
    return {"title": folder, "expression": expression}


@pytest.mark.slow
def test_store_put_and_get_round_trip(vm, gcs_server, gcs_bucket):  # noqa: F811
    """Uploads go through the run's signed POST policy (any key under its own), its payload
    comes back through its signed URL."""
    tmp: Path = vm.tmp_path
    (tmp / "summary.csv").write_text("a,b\n1,2\n")
    (tmp / "payload.tar.gz").write_bytes(b"the payload")
    result = vm(
        'store_put summary.csv "runs/r1/results/sum mary+1.csv" && '
        "store_put payload.tar.gz runs/r1/payload.tar.gz && "
        "store_get runs/r1/payload.tar.gz back.tar.gz"
    )
    assert result.returncode == 0, result.stderr
    assert (tmp / "back.tar.gz").read_bytes() == b"the payload"
    bucket = gcs_server.client().bucket(gcs_bucket)
    blob = bucket.get_blob("team/bench/runs/r1/results/sum mary+1.csv")
    assert blob is not None and blob.content_type == "text/csv"
    assert blob.download_as_bytes() == b"a,b\n1,2\n"
    assert bucket.get_blob("team/bench/runs/r1/payload.tar.gz").content_type == "application/gzip"
    assert vm.proxy.denied == []


def test_store_put_outside_the_runs_own_key_is_refused_by_the_script_and_by_the_bucket(
    vm,
    gcs_server,  # noqa: F811
    gcs_bucket,  # noqa: F811
):
    """The script writes nothing outside RUN_KEY; the same form sent with another run's key
    is refused by Cloud Storage (the policy's starts-with condition on the key)."""
    (vm.tmp_path / "evil.csv").write_text("evil\n")
    own = vm("store_put evil.csv runs/r2/results/summary.csv")
    assert own.returncode != 0
    assert "runs/r2/results/summary.csv is not this run's to write" in own.stderr
    # Through a file: the vm fixture quotes its snippet for bash only roughly.
    (vm.tmp_path / "bent.sh").write_text(
        "form=()\n"
        "for f in $RUN_UPLOAD_FIELD_NAMES; do\n"
        '  v=RUN_UPLOAD_FIELD_${f//-/_}; form+=(--form-string "$f=${!v}")\n'
        "done\n"
        'curl -sS -o /dev/null -w "%{http_code}" "${form[@]}" \\\n'
        '  --form-string "key=$PREFIX/runs/r2/results/summary.csv" \\\n'
        '  --form-string Content-Type=text/csv -F file=@evil.csv "$RUN_UPLOAD_URL"\n'
    )
    bent = vm(f"source {vm.tmp_path / 'bent.sh'}")
    assert bent.stdout == "403", bent.stderr
    assert [what for what, _, _ in vm.proxy.denied] == ["signed"]
    assert list(gcs_server.client().list_blobs(gcs_bucket)) == []


def test_store_get_of_a_missing_payload_fails_fast_and_leaves_nothing(vm):
    result = vm("store_get runs/r1/payload.tar.gz payload.tar.gz")
    assert result.returncode != 0
    assert "download of runs/r1/payload.tar.gz failed (HTTP 404)" in result.stderr
    assert not list(vm.tmp_path.glob("payload.tar.gz*"))


def test_machine_facts_preempted_and_power_off(vm):
    result = vm(
        'machine_facts; echo "$BENCH_ZONE $BENCH_MACHINE_TYPE $BENCH_SPOT"; '
        "if machine_preempted; then echo preempted; else echo not-preempted; fi; "
        "machine_watchdog 3600; stop_machine"
    )
    assert result.returncode == 0, result.stderr
    assert "us-central1-a g2-standard-4" in result.stdout
    assert "not-preempted" in result.stdout
    env = (vm.tmp_path / "machine.env").read_text()
    assert "export BENCH_ZONE=us-central1-a" in env
    assert (vm.tmp_path / "shutdown.args").read_text().splitlines() == [
        "-h +65 bench watchdog",
        "-h now",
    ]


def test_the_token_never_appears_in_the_rendered_script(vm):
    text = (vm.tmp_path / "backend.sh").read_text()
    assert "fake-token" not in text and "Bearer " in text  # only the header template


@pytest.mark.slow
def test_rendered_startup_script_passes_shellcheck(tmp_path):
    from orchestrator.render import render_startup

    config = BenchConfig(project="bench-test-project", bucket="bench-bucket", prefix="a/b_c.d")
    script = tmp_path / "startup.sh"
    script.write_text(render_startup(make_spec(), "/var/lib/bench/x", template_vars(config)))
    shellcheck = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.defpath}")
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_hostile_values_stay_literal(tmp_path):
    # Values no validator would pass: quoting must hold whatever reaches the template.
    config = BenchConfig.model_construct(
        project="bench-test-project",
        bucket="b$(touch x)",
        prefix="it's/a prefix",
        storage_endpoint=None,
        metadata_endpoint='http://m"`id`',
    )
    partial = template_environment().get_template("partials/backend/gce.sh.j2")
    (tmp_path / "backend.sh").write_text(partial.render(**template_vars(config)))
    values = subprocess.run(
        ["bash", "-c", 'source backend.sh; printf "%s|" "$BUCKET" "$PREFIX" "$METADATA_ENDPOINT"'],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    ).stdout
    assert values == "b$(touch x)|it's/a prefix|http://m\"`id`|"
    assert not (tmp_path / "x").exists()


def test_machine_preempted_reads_the_metadata_flag(vm):
    vm.compute.instance(ZONE, NAME).preempted = True
    result = vm("machine_preempted && echo preempted")
    assert result.returncode == 0 and result.stdout.strip() == "preempted"


def _may_delete_itself(vm, allowed: bool) -> None:
    """The VM runs as bench setup's dedicated account; `allowed`: it holds the delete role."""
    backend = vm.tmp_path / "backend.sh"
    backend.write_text(
        backend.read_text().replace("readonly SELF_DELETE=false", "readonly SELF_DELETE=true")
    )
    account = "bench-vm@bench-test-project.iam.gserviceaccount.com"
    instance = vm.compute.instance(ZONE, NAME)
    instance.sent["serviceAccounts"] = [
        {
            "email": account,
            "scopes": [
                "https://www.googleapis.com/auth/devstorage.read_only",
                "https://www.googleapis.com/auth/compute",
            ],
        }
    ]
    if allowed:
        vm.compute.iam.grant_self_delete(PROJECT, account)


@pytest.mark.slow
def test_a_vm_whose_account_may_deletes_itself_and_does_not_power_off(vm):
    _may_delete_itself(vm, allowed=True)
    result = vm("stop_machine")
    assert result.returncode == 0, result.stderr
    assert "nothing is left billing" in result.stdout
    (delete,) = vm.compute.calls("instances.delete")
    assert delete.caller == f"vm:{NAME}"
    vm.compute.wait_for_status(ZONE, NAME, "DELETED")
    assert not (vm.tmp_path / "shutdown.args").exists()


@pytest.mark.slow
def test_a_vm_whose_self_delete_fails_idles_until_gce_deletes_it_at_its_cap(vm):
    # A power-off would leave the disk billing without end: GCE clears max_run_duration
    # when a VM stops (https://cloud.google.com/compute/docs/instances/limit-vm-runtime).
    # Running on, the VM is deleted with its disk at its cap (action DELETE), a bill the
    # worst case already holds; `bench stop-all` deletes it sooner.
    _may_delete_itself(vm, allowed=False)
    result = vm("stop_machine")
    assert result.returncode == 0, result.stderr
    assert "403" in result.stderr
    assert "idling until GCE deletes it, disk included, at its time cap" in result.stdout
    assert not (vm.tmp_path / "shutdown.args").exists()
    assert (vm.tmp_path / "sleep.args").read_text().splitlines() == ["infinity"]
    assert [i.name for i in vm.compute.instances()] == [NAME]


def test_a_vm_without_the_self_delete_account_powers_off_as_its_launch_accepted(vm):
    result = vm("stop_machine")  # SELF_DELETE=false: launched with --allow-leftover-disk
    assert result.returncode == 0, result.stderr
    assert (vm.tmp_path / "shutdown.args").read_text().splitlines() == ["-h now"]
    assert not (vm.tmp_path / "sleep.args").exists()
