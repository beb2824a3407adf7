"""The environment and kernel-build caches in the bucket, run by bash against the real
fake-gcs-server through the gce partial's store_put/store_get: saved once as the run's own
candidate, promoted into cache/ by the controller for a trusted run only, restored later,
and a corrupt object detected by its sha256 and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.config import BenchConfig
from orchestrator.render import APT_LOCK_TIMEOUT_SECONDS, template_environment
from orchestrator.service.cache import promote_cache_candidates
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
    """What `bench fetch` does with run r1's candidates (service/cache.py)."""
    config = BenchConfig(
        project="bench-test-project",
        bucket=bucket,
        prefix=PREFIX,
        storage_endpoint=gcs_server.endpoint,
    )
    record = cache_record(trusted, run_id="r1", secret="")
    return promote_cache_candidates(GcsStore(config), record)


def corrupt(gcs_server, bucket: str, key: str) -> None:  # noqa: F811
    """Overwrite the cached tarball (not its digest), as a bad upload or a bit flip would."""
    sha = blob(gcs_server, bucket, f"{key}.sha256").download_as_text().split()
    tarball = blob(gcs_server, bucket, f"{key}.tar.{sha[1]}")
    tarball.upload_from_string(tarball.download_as_bytes()[:-7] + b"garbage")


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
    saved = cache_vm(f'cache_format() {{ echo {fmt}; }}; cache_save tree "kernels/k1"')
    assert saved.returncode == 0, saved.stderr + saved.stdout
    assert blob(gcs_server, gcs_bucket, "kernels/k1.sha256") is None  # a candidate only
    assert promote(gcs_server, gcs_bucket, trusted=False) == []
    missing = cache_vm('cache_restore "kernels/k1" back || echo "exit $?"')
    assert "no kernels/k1 yet" in missing.stdout and "exit 1" in missing.stdout
    promoted = promote(gcs_server, gcs_bucket)
    assert promoted == [f"cache/kernels/k1.tar.{fmt}", "cache/kernels/k1.sha256"]
    restored = cache_vm('cache_restore "kernels/k1" back')
    assert restored.returncode == 0, restored.stderr + restored.stdout
    assert (tmp / "back" / "sub" / "file.txt").read_text() == "cached bytes\n"
    digest, stored = blob(gcs_server, gcs_bucket, "kernels/k1.sha256").download_as_text().split()
    data = blob(gcs_server, gcs_bucket, f"kernels/k1.tar.{fmt}").download_as_bytes()
    assert stored == fmt and hashlib.sha256(data).hexdigest() == digest

    corrupt(gcs_server, gcs_bucket, "kernels/k1")
    refused = cache_vm('cache_restore "kernels/k1" back2 || echo "exit $?"')
    assert refused.returncode == 0, refused.stderr
    assert "kernels/k1 is corrupt" in refused.stdout and "exit 1" in refused.stdout
    assert not (tmp / "back2").exists()
    missing = cache_vm('cache_restore "kernels/none" back3 || echo "exit $?"')
    assert "no kernels/none yet" in missing.stdout and "exit 1" in missing.stdout


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
    assert len(promote(gcs_server, gcs_bucket)) == 2
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


# A stand-in for kernels.flash_attention.build on a machine without nvcc: it "compiles" by
# writing the library into BENCH_KERNEL_CACHE/<key>, counting compilations, and fails its
# smoke test when the library there is not what it writes.
FAKE_BUILD = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    key, root = "src0123-nvcc12.9-sm_89", Path(os.environ["BENCH_KERNEL_CACHE"])
    assert sys.argv[sys.argv.index("--arch") + 1] == "8.9"  # from nvidia-smi, not torch
    if "--print-cache-key" in sys.argv:
        print(key)
        sys.exit(0)
    library = root / key / "libflash_attention.so"
    cached = library.is_file() and "--force" not in sys.argv
    if not cached:
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_text("compiled")
        with open(os.environ["COMPILES"], "a") as f:
            f.write("compile\\n")
    record = Path(sys.argv[sys.argv.index("--record") + 1])
    record.write_text(json.dumps({"cached": cached}))
    sys.exit(0 if library.read_text() == "compiled" else 1)
    """
)


def fake_kernel_payload(tmp: Path, compute_cap: str) -> str:
    """A payload whose kernel build is FAKE_BUILD (the support check is the real one), on a
    GPU whose nvidia-smi reports `compute_cap`; returns the shell line running phase_build."""
    package = tmp / "payload" / "kernels" / "flash_attention"
    package.mkdir(parents=True, exist_ok=True)
    (tmp / "payload" / "kernels" / "__init__.py").write_text("")
    support = Path(__file__).parents[2] / "kernels" / "support.py"
    (tmp / "payload" / "kernels" / "support.py").write_text(support.read_text())
    (package / "__init__.py").write_text("")
    (package / "build.py").write_text(FAKE_BUILD)
    (tmp / "python.path").write_text(sys.executable)
    nvidia_smi = tmp / "bin" / "nvidia-smi"  # the vm fixture's stubs are first on PATH
    nvidia_smi.write_text(f'#!/bin/bash\n[[ "$*" == *compute_cap* ]] && echo {compute_cap}\n')
    nvidia_smi.chmod(0o755)
    return (
        f"export COMPILES={tmp}/compiles; payload_python() {{ cat {tmp}/python.path; }}; "
        "export -f payload_python; export BENCH_KERNEL_CACHE=$WORK_DIR/kernels-$RANDOM; "
        "phase_build"
    )


def test_a_gpu_older_than_the_kernel_builds_nothing_and_is_not_an_error(cache_vm):
    # A T4 (sm_75): the baselines still run; the build phase says why flash will not.
    tmp = cache_vm.tmp_path
    result = cache_vm(fake_kernel_payload(tmp, "7.5"))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "build: flash: unsupported on sm_75" in result.stdout
    assert not (tmp / "compiles").exists() and not (tmp / "build.json").exists()


def test_kernel_build_cache_skips_the_build_and_rebuilds_a_corrupt_one(
    cache_vm,
    gcs_server,  # noqa: F811
    gcs_bucket,  # noqa: F811
):
    tmp = cache_vm.tmp_path
    build = fake_kernel_payload(tmp, "8.9")

    def compiles() -> int:
        path = tmp / "compiles"
        return len(path.read_text().splitlines()) if path.exists() else 0

    first = cache_vm(build)
    assert first.returncode == 0, first.stderr + first.stdout
    assert compiles() == 1 and "cache: saved kernels/src0123-nvcc12.9-sm_89" in first.stdout
    promote(gcs_server, gcs_bucket)  # `bench fetch` of the trusted run
    second = cache_vm(build)  # a new machine: an empty local kernel cache
    assert second.returncode == 0, second.stderr
    assert compiles() == 1, "the same sources on the same GPU type must not compile again"
    assert json.loads((tmp / "build.json").read_text()) == {"cached": True}

    corrupt(gcs_server, gcs_bucket, "kernels/src0123-nvcc12.9-sm_89")
    third = cache_vm(build)
    assert third.returncode == 0, third.stderr
    assert "is corrupt" in third.stdout and compiles() == 2
    promote(gcs_server, gcs_bucket)
    fourth = cache_vm(build)  # the rebuilt library was uploaded again
    assert fourth.returncode == 0 and compiles() == 2
