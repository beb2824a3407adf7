"""The environment and kernel-build caches in the bucket, run by bash against the real
fake-gcs-server through the gce partial's store_put/store_get: saved once as the run's own
candidate, promoted into cache/ by the controller for a trusted run only (one line saying
so), restored later,
and a corrupt object detected by its sha256 and rebuilt.
"""

from __future__ import annotations

import hashlib
import shutil
import sys

import pytest

from orchestrator.config import BenchConfig
from orchestrator.render import APT_LOCK_TIMEOUT_SECONDS, template_environment
from orchestrator.service.cache import promote_cache_candidates
from orchestrator.service.plans import resolve_plan
from orchestrator.stores.gcs import GcsStore
from tests.fakes.fixtures import gcs_bucket, gcs_server  # noqa: F401 - fixtures
from tests.unit.test_gce_startup_partial import vm  # noqa: F401 - fixture
from tests.unit.test_run_containment import cache_record

PREFIX = "team/bench"


@pytest.fixture
def cache_vm(vm):  # noqa: F811
    """The vm fixture with the cache, environment and build partials sourced too."""
    env = template_environment()
    for name, context in (
        ("cache", {}),
        ("environment", {"apt_lock_timeout_seconds": APT_LOCK_TIMEOUT_SECONDS}),
        (
            "build",
            {
                "build_kernel": True,
                "build_baseline": False,
                "plan_name": "default",
                "user_kernel_builds": [],
            },
        ),
    ):
        text = env.get_template(f"partials/{name}.sh.j2").render(**context)
        (vm.tmp_path / f"{name}.sh").write_text(text)

    def run(snippet: str):
        # Through a file: the vm fixture quotes its snippet for bash only roughly.
        script = vm.tmp_path / "snippet.sh"
        script.write_text(
            'fail() { echo "FAIL: $*" >&2; exit 1; }\n'
            "export -f fail\n"
            "export PIP_INDEX_ARGS='' PLAN_NAME=default RUN_KEY=runs/r1\n"
            "source cache.sh; source environment.sh; source build.sh\n" + snippet + "\n"
        )
        return vm(f"source {script}")

    run.tmp_path = vm.tmp_path  # type: ignore[attr-defined]
    return run


def blob(gcs_server, bucket: str, key: str):  # noqa: F811
    return gcs_server.client().bucket(bucket).get_blob(f"{PREFIX}/cache/{key}")


def promote(gcs_server, bucket: str, trusted: bool = True) -> list[str]:  # noqa: F811
    """What `bench fetch` does with run r1's candidates (service/cache.py), run r1 a plan
    that builds no user's tree: one line per entry."""
    config = BenchConfig(
        project="bench-test-project",
        bucket=bucket,
        prefix=PREFIX,
        storage_endpoint=gcs_server.endpoint,
    )
    record = cache_record(trusted, run_id="r1", secret="")
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    return [d.line() for d in promote_cache_candidates(GcsStore(config), record, plan)]


def corrupt(gcs_server, bucket: str, key: str) -> None:  # noqa: F811
    """Overwrite the cached tarball (not its digest), as a bad upload or a bit flip would."""
    sha = blob(gcs_server, bucket, f"{key}.sha256").download_as_text().split()
    tarball = blob(gcs_server, bucket, f"{key}.tar.{sha[1]}")
    tarball.upload_from_string(tarball.download_as_bytes()[:-7] + b"garbage")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["zst", "tar"])
def test_a_saved_tree_comes_back_and_a_corrupt_one_is_refused(
    cache_vm,
    gcs_server,  # noqa: F811
    gcs_bucket,  # noqa: F811
    fmt,
):
    if fmt == "zst" and not shutil.which("zstd"):
        pytest.skip("no zstd on this machine")
    tmp = cache_vm.tmp_path
    (tmp / "tree" / "sub").mkdir(parents=True)
    (tmp / "tree" / "sub" / "file.txt").write_text("cached bytes\n")
    saved = cache_vm(f'cache_format() {{ echo {fmt}; }}; cache_save tree "env/k1"')
    assert saved.returncode == 0, saved.stderr + saved.stdout
    assert blob(gcs_server, gcs_bucket, "env/k1.sha256") is None  # a candidate only
    assert promote(gcs_server, gcs_bucket, trusted=False) == [
        "cache: refused env/k1: the run was launched --untrusted (or under CI): it gives the "
        "cache nothing"
    ]
    missing = cache_vm('cache_restore "env/k1" back || echo "exit $?"')
    assert "no env/k1 yet" in missing.stdout and "exit 1" in missing.stdout
    assert promote(gcs_server, gcs_bucket) == ["cache: promoted env/k1: the environment"]
    restored = cache_vm('cache_restore "env/k1" back')
    assert restored.returncode == 0, restored.stderr + restored.stdout
    assert (tmp / "back" / "sub" / "file.txt").read_text() == "cached bytes\n"
    digest, stored = blob(gcs_server, gcs_bucket, "env/k1.sha256").download_as_text().split()
    data = blob(gcs_server, gcs_bucket, f"env/k1.tar.{fmt}").download_as_bytes()
    assert stored == fmt and hashlib.sha256(data).hexdigest() == digest

    corrupt(gcs_server, gcs_bucket, "env/k1")
    refused = cache_vm('cache_restore "env/k1" back2 || echo "exit $?"')
    assert refused.returncode == 0, refused.stderr
    assert "env/k1 is corrupt" in refused.stdout and "exit 1" in refused.stdout
    assert not (tmp / "back2").exists()
    missing = cache_vm('cache_restore "env/none" back3 || echo "exit $?"')
    assert "no env/none yet" in missing.stdout and "exit 1" in missing.stdout


@pytest.mark.slow
def test_environment_cache_built_restored_and_rebuilt_when_corrupt(
    cache_vm,
    gcs_server,  # noqa: F811
    gcs_bucket,  # noqa: F811
):
    # A venv over this interpreter (as over a PyTorch image's python) that sees its pip:
    # nothing is fetched from an index, and without a pip of its own (ensurepip takes
    # seconds) the venv is small enough to tar three times in well under a second.
    base = sys.executable
    provide = (
        f"provide_venv {base} '--system-site-packages --without-pip' pip; "
        'venv/bin/python -c "import sys; print(sys.prefix)"'
    )
    first = cache_vm(provide)
    assert first.returncode == 0, first.stderr + first.stdout
    assert first.stdout.splitlines()[-2:] == ["built", str(cache_vm.tmp_path / "venv")]
    (promoted,) = promote(gcs_server, gcs_bucket)
    assert promoted.startswith("cache: promoted env/env-") and promoted.endswith("environment")
    keys = [
        b.name for b in gcs_server.client().list_blobs(gcs_bucket, prefix=f"{PREFIX}/cache/env/")
    ]
    assert len(keys) == 2 and any(k.endswith(".sha256") for k in keys)
    key = keys[0].removeprefix(f"{PREFIX}/cache/").rsplit(".tar.", 1)[0].removesuffix(".sha256")

    (cache_vm.tmp_path / "venv" / "marker").write_text("a fresh machine has no venv")
    second = cache_vm("rm -rf venv; " + provide)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-2] == "cache"
    assert "cache: restored env/" in second.stderr

    corrupt(gcs_server, gcs_bucket, key)
    third = cache_vm("rm -rf venv; " + provide)
    assert third.returncode == 0, third.stderr
    assert "is corrupt" in third.stderr and third.stdout.splitlines()[-2] == "built"
    promote(gcs_server, gcs_bucket)
    # Rebuilt and saved again: the bucket's digest matches its tarball once more.
    digest, fmt = blob(gcs_server, gcs_bucket, f"{key}.sha256").download_as_text().split()
    data = blob(gcs_server, gcs_bucket, f"{key}.tar.{fmt}").download_as_bytes()
    assert hashlib.sha256(data).hexdigest() == digest


def test_a_changed_pin_is_a_different_environment_key(cache_vm):
    keys = cache_vm(
        'cache_key env img "3.10" "" "torch==2.8.0"; echo; '
        'cache_key env img "3.10" "" "torch==2.9.0"; echo; '
        'cache_key env other "3.10" "" "torch==2.8.0"'
    )
    first, second, third = keys.stdout.split()
    assert len({first, second, third}) == 3 and first.startswith("env-")
