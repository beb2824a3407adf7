"""Code on a run's VM is a stranger's, and every name is public (docs/security.md, "Every
name is public"): internal DNS tells any VM of the network every other VM's name
(https://cloud.google.com/compute/docs/internal-dns), and a run's object keys and job names
follow from its run id. A run whose VM executes hostile code (a `python3` that attacks
before doing its job, as a user's kernel or a pull request could) reverse-resolves its
subnet, derives every live run's object keys from the names it finds, is told the keys of a
finished run too, and tries to read, overwrite and delete their objects with the VM's own
token and with its own run's signed grants bent to another key; it also lists the bucket
and plants a build-cache entry. Every attempt fails, the other runs' objects are
byte-identical afterwards, and the hostile run itself completes and is fetched.
"""

from __future__ import annotations

import os
import sys

import pytest

from orchestrator.backends.gce.builder import build_instance
from orchestrator.backends.gce.compute import ComputeApi
from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from results_schema.names import new_run_id
from tests.e2e.test_gce_cli import plan_file
from tests.e2e.test_gce_setup import ACCOUNT, PROJECT, iam  # noqa: F401 - fixture
from tests.limits import HANG_SECONDS
from tests.unit.test_gce_builder import make_spec
from tests.unit.test_gce_compute import config_for

pytestmark = pytest.mark.timeout(300)

# Reverse-resolves the first addresses of the default network's subnet through the VM's
# resolver (the stand-in's BENCH_FAKE_DNS, 169.254.169.254 on GCE) and prints each name.
RESOLVE = r"""
import os, socket, struct, sys
host, port = os.environ["BENCH_FAKE_DNS"].split(":")
for last in range(2, 40):
    name = f"{last}.0.128.10.in-addr.arpa"
    query = struct.pack("!HHHHHH", last, 0x0100, 1, 0, 0, 0)
    query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    query += struct.pack("!HH", 12, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(query, (host, int(port)))
        reply = s.recv(512)
    if struct.unpack("!H", reply[6:8])[0]:
        at, labels = len(query) + 12, []
        while reply[at]:
            labels.append(reply[at + 1 : at + 1 + reply[at]].decode())
            at += 1 + reply[at]
        print(".".join(labels))
"""

# Each attempt prints "<what> <key> <HTTP status>"; curl's -w reports the status even on an
# error. A run's own grants are what its script holds (RUN_UPLOAD_*, RUN_PAYLOAD_URL): the
# attacker bends them to another run's key.
ATTACK = r"""#!/usr/bin/env bash
if mkdir "$ATTACK_DIR/started" 2>/dev/null; then
  {
    code() { _gce_curl -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; echo; }
    plain() { curl -sS -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; echo; }
    objects="$STORAGE_ENDPOINT/storage/v1/b/$BUCKET/o"
    upload="$STORAGE_ENDPOINT/upload/storage/v1/b/$BUCKET/o?uploadType=media&name="
    "$REAL_PYTHON" -c "$RESOLVE" > "$ATTACK_DIR/names.txt"
    keys=$(sed -n 's/^bench-\([^.]*\)\..*/runs\/\1/p' "$ATTACK_DIR/names.txt")
    echo "list-runs - $(code "$objects?prefix=$(_gce_urlencode "$PREFIX/runs/")")"
    echo "list-all - $(code "$objects")"
    for key in $keys $VICTIM_KEYS; do
      [[ "$key" == "$RUN_KEY" ]] && continue
      summary=$(_gce_urlencode "$PREFIX/$key/results/summary.csv")
      echo "read-summary $key $(code "$objects/$summary?alt=media")"
      payload=$(_gce_urlencode "$PREFIX/$key/payload.tar.gz")
      echo "read-payload $key $(code "$objects/$payload?alt=media")"
      echo "overwrite-summary $key $(code -X POST --data-binary 'evil' "$upload$summary")"
      manifest=$(_gce_urlencode "$PREFIX/$key/manifest.json")
      echo "overwrite-manifest $key $(code -X POST --data-binary '{}' "$upload$manifest")"
      echo "delete-summary $key $(code -X DELETE "$objects/$summary")"
      bent=${RUN_PAYLOAD_URL/\/$RUN_KEY\//\/$key\/}
      [[ "$bent" != "$RUN_PAYLOAD_URL" ]] || bent="$STORAGE_ENDPOINT/not-bent"
      echo "signed-read-bent $key $(plain "$bent")"
      form=()
      for field in $RUN_UPLOAD_FIELD_NAMES; do
        value=RUN_UPLOAD_FIELD_${field//-/_}
        form+=(-F "$field=${!value}")
      done
      form+=(-F "key=$PREFIX/$key/manifest.json" -F 'file=@/dev/null')
      target=${RUN_UPLOAD_URL:-$STORAGE_ENDPOINT/$BUCKET}
      echo "signed-overwrite-bent $key $(plain "${form[@]}" "$target")"
    done
    cache=$(_gce_urlencode "$PREFIX/cache/kernels/any")
    echo "plant-cache-digest - $(code -X POST --data-binary 'x tar' "$upload$cache.sha256")"
    echo "plant-cache-tarball - $(code -X POST --data-binary 'x' "$upload$cache.tar.tar")"
  } > "$ATTACK_DIR/report.partial" && mv "$ATTACK_DIR/report.partial" "$ATTACK_DIR/report.txt"
fi
exec "$REAL_PYTHON" "$@"
"""


# What the attack tries on another run's objects, each refused: the VM's account holds no
# role on runs/ (its token reads and writes nothing), and its own run's grants name its own
# objects (bent to another key, refused).
REFUSED_ON_ANOTHER_RUN = {
    "read-summary": "403",
    "read-payload": "403",
    "overwrite-summary": "403",
    "overwrite-manifest": "403",
    "delete-summary": "403",
    "signed-read-bent": "403",
    "signed-overwrite-bent": "403",
}


def _attacker(tmp_path, victim_keys: list[str]):
    """A directory whose python3 attacks once, then runs the real interpreter, and the
    variables that tell it the keys no DNS name gives (through the stand-in's VM
    environment): a finished run's, whose VM is gone."""
    bin_dir = tmp_path / "hostile-bin"
    bin_dir.mkdir()
    script = bin_dir / "python3"
    script.write_text(ATTACK)
    script.chmod(0o755)
    return str(bin_dir), {
        "ATTACK_DIR": str(tmp_path),
        "REAL_PYTHON": sys.executable,
        "RESOLVE": RESOLVE,
        "VICTIM_KEYS": " ".join(victim_keys),
    }


def _live_bench_run(gce, gcs_server, bucket: str, zone: str) -> tuple[str, str]:
    """Another run, live: its VM named as bench names a run's VM, running, and its objects
    under its run key as launch and the VM put them. Returns its VM name and run key."""
    spec = make_spec(run_id=new_run_id())
    config = config_for(gce)
    script = "#!/bin/bash\nsleep 600\n"
    ComputeApi(config).insert(
        zone, build_instance(spec, config, zone, script, "#!/bin/bash\n", True)
    )
    client = gcs_server.client().bucket(bucket)
    for name in ("payload.tar.gz", "results/summary.csv", "manifest.json"):
        client.blob(f"bench/{spec.run_prefix}/{name}").upload_from_string(f"theirs {name}")
    return spec.instance_name, spec.run_prefix


def _objects(gcs_server, bucket: str, prefix: str) -> dict[str, bytes]:
    blobs = gcs_server.client().list_blobs(bucket, prefix=prefix)
    return {b.name: b.download_as_bytes() for b in blobs}


def _report(tmp_path) -> dict[tuple[str, str], str]:
    lines = (tmp_path / "report.txt").read_text().splitlines()
    return {(what, key): code for what, key, code in (line.split() for line in lines)}


def test_a_hostile_vm_that_knows_every_name_touches_nothing_but_its_own_run(
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
    (finished,) = RunRegistry(bench_env / "state" / "runs.sqlite").all()
    finished_before = _objects(gcs_server, bucket, f"bench/{finished.run_key}/")
    assert f"bench/{finished.run_key}/results/summary.csv" in finished_before

    live_name, live_key = _live_bench_run(gce, gcs_server, bucket, "us-central1-a")
    live_before = _objects(gcs_server, bucket, f"bench/{live_key}/")
    path, env = _attacker(tmp_path, [finished.run_key])
    gce.config.vm_path = [path, *gce.config.vm_path]
    gce.config.vm_env = {**gce.config.vm_env, **env}
    capsys.readouterr()
    assert main(launch) == 0

    # Internal DNS gave it the live run's VM name, hence its key.
    names = (tmp_path / "names.txt").read_text().split()
    assert f"{live_name}.us-central1-a.c.{PROJECT}.internal" in names
    report = _report(tmp_path)
    for key in (finished.run_key, live_key):
        attempts = {what: code for (what, on), code in report.items() if on == key}
        assert attempts == REFUSED_ON_ANOTHER_RUN, key
    assert report[("list-runs", "-")] == "403" and report[("list-all", "-")] == "403"
    assert report[("plant-cache-digest", "-")] == "403"  # cache/ is read-only for a VM
    assert report[("plant-cache-tarball", "-")] == "403"
    # The other runs' objects, byte for byte; nothing planted in the cache.
    assert _objects(gcs_server, bucket, f"bench/{finished.run_key}/") == finished_before
    assert _objects(gcs_server, bucket, f"bench/{live_key}/") == live_before
    assert not list(gcs_server.client().list_blobs(bucket, prefix="bench/cache/"))

    registry = RunRegistry(bench_env / "state" / "runs.sqlite")
    (hostile,) = [r for r in registry.all() if r.run_id != finished.run_id]
    assert main(["fetch", hostile.run_id]) == 0 and main(["fetch", finished.run_id]) == 0
    assert registry.get(hostile.run_id).state == "complete"
    results = bench_env / "work" / "results"
    assert b"evil" not in (results / finished.run_id / "results" / "summary.csv").read_bytes()


def test_the_same_attack_reads_every_run_through_the_grants_bench_made_before(
    iam,  # noqa: F811 - the fixture
    gce,
    gcs_server,
    tmp_path,
    monkeypatch,
):
    """What `bench setup` granted before runs were contained (roles/storage.objectUser on the
    whole bucket; delete on bench-* tested as a bare name): the stand-in evaluates those
    grants too, and the attack above gets through them: it lists the bucket and reads
    another run's results and payload. The test above can fail. Its writes with the token
    are refused now even so, by the VM's read-only storage scope (test_gce_scopes.py), before
    IAM is asked; its own run's grants bent to another key are refused by their signature."""
    account = f"serviceAccount:{ACCOUNT}"
    iam.create_account(PROJECT, "bench-vm")  # a VM runs only as an account that exists
    iam.create_account(PROJECT, "bench-signer")  # launch signs each run's grants as it
    bucket = os.environ["BENCH_BUCKET"]
    gcs_server.client().create_bucket(bucket)
    iam.proxy.grant(account)  # roles/storage.objectUser, no condition
    iam.proxy.grant(f"serviceAccount:bench-signer@{PROJECT}.iam.gserviceaccount.com")
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", ACCOUNT)
    victim = "runs/20261101-120000-abcdef"
    for name in ("payload.tar.gz", "results/summary.csv", "manifest.json"):
        gcs_server.client().bucket(bucket).blob(f"bench/{victim}/{name}").upload_from_string(
            f"theirs {name}"
        )
    before = _objects(gcs_server, bucket, f"bench/{victim}/")
    path, env = _attacker(tmp_path, [victim])
    gce.config.vm_path = [path, *gce.config.vm_path]
    gce.config.vm_env = {**gce.config.vm_env, **env}
    plan = plan_file(tmp_path)
    # The attack is the VM's first python3: the rest of the run is not waited for.
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan]) == 0
    gce.wait_for((tmp_path / "report.txt").exists, HANG_SECONDS)
    report = _report(tmp_path)
    assert report[("list-runs", "-")] == "200" and report[("list-all", "-")] == "200"
    assert report[("read-summary", victim)] == "200"
    assert report[("read-payload", victim)] == "200"
    writes = ("overwrite-summary", "overwrite-manifest", "delete-summary")
    assert [report[(what, victim)] for what in writes] == ["403"] * 3
    assert report[("plant-cache-digest", "-")] == "403"
    assert report[("plant-cache-tarball", "-")] == "403"
    # Every refusal of the token's writes was for its scope, none for IAM: these grants
    # alone would have let them through.
    token_denied = [d for d in iam.proxy.denied if d[0] == ACCOUNT]
    assert len(token_denied) == 5 and token_denied == iam.proxy.denied_for_scope
    assert report[("signed-read-bent", victim)] == "403"
    assert report[("signed-overwrite-bent", victim)] == "403"
    assert _objects(gcs_server, bucket, f"bench/{victim}/") == before
