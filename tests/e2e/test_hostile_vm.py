"""Code on a run's VM is a stranger's: with `bench setup`'s identity it touches only its own
run (docs/security.md). A run whose VM executes hostile code (a `python3` that attacks before
doing its job, as a user's kernel or a pull request could) tries to list the bucket, to
overwrite another run's results, to plant a build-cache entry and to delete another bench
VM, through the real startup script's own helpers and token. Every attempt fails, the other
run's objects are byte-identical afterwards, and the hostile run itself completes and is
fetched.
"""

from __future__ import annotations

import os
import sys

import pytest

from orchestrator.backends.gce.builder import build_instance
from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from results_schema.names import new_run_id, new_run_secret
from tests.e2e.test_gce_cli import plan_file
from tests.e2e.test_gce_setup import ACCOUNT, PROJECT, iam  # noqa: F401 - fixture
from tests.limits import HANG_SECONDS
from tests.unit.test_gce_builder import make_spec
from tests.unit.test_gce_compute import config_for

pytestmark = pytest.mark.timeout(300)

# Each attempt prints "<what> <HTTP status>"; curl's -w reports the status even on an error.
ATTACK = r"""#!/usr/bin/env bash
if mkdir "$ATTACK_DIR/started" 2>/dev/null; then
  {
    code() { _gce_curl -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; echo; }
    objects="$STORAGE_ENDPOINT/storage/v1/b/$BUCKET/o"
    upload="$STORAGE_ENDPOINT/upload/storage/v1/b/$BUCKET/o?uploadType=media&name="
    instances="$COMPUTE_ENDPOINT/compute/v1/projects/$VICTIM_PROJECT"
    echo "list-runs $(code "$objects?prefix=$(_gce_urlencode "$PREFIX/runs/")")"
    echo "list-all $(code "$objects")"
    echo "overwrite-summary $(code -X POST --data-binary 'evil' \
      "$upload$(_gce_urlencode "$PREFIX/runs/$VICTIM_RUN/results/summary.csv")")"
    echo "overwrite-manifest $(code -X POST --data-binary '{}' \
      "$upload$(_gce_urlencode "$PREFIX/runs/$VICTIM_RUN/manifest.json")")"
    echo "plant-cache-digest $(code -X POST --data-binary 'x tar' \
      "$upload$(_gce_urlencode "$PREFIX/cache/kernels/any.sha256")")"
    echo "plant-cache-tarball $(code -X POST --data-binary 'x' \
      "$upload$(_gce_urlencode "$PREFIX/cache/kernels/any.tar.tar")")"
    echo "list-instances $(code "$instances/aggregated/instances")"
    zone="$instances/zones/$VICTIM_ZONE/instances"
    echo "get-victim $(code "$zone/$VICTIM_NAME")"
    echo "delete-guessed $(code -X DELETE "$zone/bench-$VICTIM_RUN")"
  } > "$ATTACK_DIR/report.partial" && mv "$ATTACK_DIR/report.partial" "$ATTACK_DIR/report.txt"
fi
exec "$REAL_PYTHON" "$@"
"""


def _attacker(tmp_path, victim_run: str, victim_zone: str, victim_name: str):
    """A directory whose python3 attacks once, then runs the real interpreter, and the
    variables that tell it whom to attack (through the stand-in's VM environment)."""
    bin_dir = tmp_path / "hostile-bin"
    bin_dir.mkdir()
    script = bin_dir / "python3"
    script.write_text(ATTACK)
    script.chmod(0o755)
    return str(bin_dir), {
        "ATTACK_DIR": str(tmp_path),
        "REAL_PYTHON": sys.executable,
        "VICTIM_RUN": victim_run,
        "VICTIM_ZONE": victim_zone,
        "VICTIM_NAME": victim_name,
        "VICTIM_PROJECT": PROJECT,
    }


def _live_bench_vm(gce, zone: str) -> str:
    """Another run's VM, named as bench names them (run id and secret), still running."""
    spec = make_spec(run_id=new_run_id(), run_secret=new_run_secret())
    config = config_for(gce)
    script = "#!/bin/bash\nsleep 600\n"
    ComputeApi(config).insert(
        zone, build_instance(spec, config, zone, script, "#!/bin/bash\n", True)
    )
    return spec.instance_name


def _objects(gcs_server, bucket: str, prefix: str) -> dict[str, bytes]:
    blobs = gcs_server.client().list_blobs(bucket, prefix=prefix)
    return {b.name: b.download_as_bytes() for b in blobs}


def test_a_hostile_vm_touches_nothing_but_its_own_run(
    iam,  # noqa: F811 - the fixture
    gce,
    gcs_server,
    tmp_path,
    capsys,
    monkeypatch,
    bench_env,
):
    assert main(["setup", "--apply"]) == 0
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    capsys.readouterr()
    assert main(["doctor"]) == 0, capsys.readouterr()  # after setup, doctor is green
    bucket = os.environ["BENCH_BUCKET"]
    plan = plan_file(tmp_path)

    # An honest run first: its results are what the attacker goes after. Run as setup's
    # account, it deletes its own VM (the one run of test_gce_setup.py's story as well).
    launch = ["launch", "--backend", "gce", "--budget", "1", "--plan", plan, "--wait"]
    assert main(launch) == 0, (capsys.readouterr(), iam.proxy.denied)
    assert gce.instances() == []
    assert "deleted itself" in capsys.readouterr().out
    (delete,) = gce.calls("instances.delete")
    assert delete.caller.startswith("vm:bench-")  # the VM itself, not the controller
    (sent,) = gce.inserted
    (account,) = sent["serviceAccounts"]
    assert account["email"] == ACCOUNT
    assert "https://www.googleapis.com/auth/compute" in account["scopes"]
    (victim,) = RunRegistry(bench_env / "state" / "runs.sqlite").all()
    before = _objects(gcs_server, bucket, f"bench/{victim.run_key}/")
    assert f"bench/{victim.run_key}/results/summary.csv" in before

    live_name = _live_bench_vm(gce, "us-central1-a")
    path, env = _attacker(tmp_path, victim.run_id, "us-central1-a", live_name)
    gce.config.vm_path = [path, *gce.config.vm_path]
    gce.config.vm_env = {**gce.config.vm_env, **env}
    capsys.readouterr()
    assert main(launch) == 0

    report = dict(line.split() for line in (tmp_path / "report.txt").read_text().splitlines())
    assert report == {
        "list-runs": "403",  # no storage.objects.list: other runs' keys cannot be found
        "list-all": "403",
        # A guessed key (the run id without its secret) is no run's key: the write lands
        # beside every run, and nothing reads it.
        "overwrite-summary": "200",
        "overwrite-manifest": "200",
        "plant-cache-digest": "403",  # cache/ is read-only for a VM
        "plant-cache-tarball": "403",
        "list-instances": "403",  # no compute list or get: no other VM's name
        "get-victim": "403",
        "delete-guessed": "404",  # bench-<run id> without the secret names no VM
    }
    # The honest run's objects, byte for byte.
    assert _objects(gcs_server, bucket, f"bench/{victim.run_key}/") == before
    assert not list(gcs_server.client().list_blobs(bucket, prefix="bench/cache/"))
    assert [i.name for i in gce.instances()] == [live_name]  # the other VM lives on

    registry = RunRegistry(bench_env / "state" / "runs.sqlite")
    (hostile,) = [r for r in registry.all() if r.run_id != victim.run_id]
    assert main(["fetch", hostile.run_id]) == 0 and main(["fetch", victim.run_id]) == 0
    assert registry.get(hostile.run_id).state == "complete"
    results = bench_env / "work" / "results"
    assert b"evil" not in (results / victim.run_id / "results" / "summary.csv").read_bytes()


def test_the_same_attack_succeeds_against_the_grants_bench_made_before(
    iam,  # noqa: F811 - the fixture
    gce,
    gcs_server,
    tmp_path,
    monkeypatch,
):
    """What `bench setup` granted before runs were contained (roles/storage.objectUser on the
    whole bucket; delete on bench-* tested as a bare name): the stand-in evaluates those
    grants too, and the attack above gets through them. The test above can fail."""
    account = f"serviceAccount:{ACCOUNT}"
    iam.create_account(PROJECT, "bench-vm")  # a VM runs only as an account that exists
    gcs_server.client().create_bucket(os.environ["BENCH_BUCKET"])
    iam.proxy.grant(account)  # roles/storage.objectUser, no condition
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    path, env = _attacker(tmp_path, "20261101-120000-abcdef", "us-central1-a", "bench-x")
    gce.config.vm_path = [path, *gce.config.vm_path]
    gce.config.vm_env = {**gce.config.vm_env, **env}
    plan = plan_file(tmp_path)
    # The attack is the VM's first python3: the rest of the run is not waited for.
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    gce.wait_for((tmp_path / "report.txt").exists, HANG_SECONDS)
    report = dict(line.split() for line in (tmp_path / "report.txt").read_text().splitlines())
    assert report["list-runs"] == "200" and report["list-all"] == "200"
    assert report["plant-cache-digest"] == "200" and report["plant-cache-tarball"] == "200"
