"""The gce end-to-end fixture: bench pointed at the compute stand-in and fake-gcs-server;
two real local runs made once for the session."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


@pytest.fixture
def gce(bench_env, compute_server, gcs_server, gcs_bucket, iam_credentials, monkeypatch):
    """bench pointed at both stand-ins; the fake VM's python3 is this test's python."""
    settings = {
        "PROJECT": "bench-test-project",
        "BUCKET": gcs_bucket,
        "ZONES": ",".join(ZONES),
        "COMPUTE_ENDPOINT": compute_server.endpoint,
        "STORAGE_ENDPOINT": gcs_server.endpoint,
        "METADATA_ENDPOINT": compute_server.metadata_url,
        "IAMCREDENTIALS_ENDPOINT": iam_credentials.sign_for("bench-test-project"),
        "VM_WORK_DIR": str(bench_env / "vm"),
        "POLL_SECONDS": "0.2",
        # The default account's VMs cannot delete themselves: launch refuses them unless
        # told (tests/e2e/test_gce_money.py tests the refusal).
        "ALLOW_LEFTOVER_DISK": "true",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"BENCH_{key}", value)
    compute_server.config.vm_path = [str(Path(sys.executable).parent)]
    # A project whose GPU quota requests were approved (a new one has 0: test_gce_doctor).
    compute_server.catalog.raise_gpu_quotas()
    return compute_server


@contextlib.contextmanager
def own_bench_env(root: Path):
    """What the bench_env fixture makes, for a fixture made once for the session: a working
    directory (root/work) and state of its own, no BENCH_* from outside; undone on exit."""
    with pytest.MonkeyPatch.context() as env:
        for name in [name for name in os.environ if name.startswith("BENCH_")]:
            env.delenv(name)
        (root / "work").mkdir()
        env.chdir(root / "work")
        env.setenv("BENCH_STATE_DIR", str(root / "state"))
        env.setenv("XDG_CONFIG_HOME", str(root / "config"))
        yield


@pytest.fixture(scope="session")
def two_local_runs(made_once) -> dict:
    """Two real local runs of a two-config plan, made once for the session (a launch is ~6 s
    of CPU; tests/conftest.py) in an environment of their own, as bench_env makes one: the
    first launched with --wait and left unfetched, the second with --wait --fetch into
    `dest`, what that launch printed and fetched and what `status --json` said then kept;
    then the first fetched beside the second. test_launch_fetch reads what the launch did,
    test_history the two fetched runs (copies: the tests never write into these)."""
    from orchestrator.cli import main
    from orchestrator.registry import RunRegistry
    from tests.e2e.test_gce_cli import plan_file

    def printed(args: list[str]) -> tuple[int, str]:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(args)
        return code, out.getvalue()

    def make(root: Path) -> dict:
        dest = root / "results"
        registry = RunRegistry(root / "state" / "runs.sqlite")
        with own_bench_env(root):
            launch = ["launch", "--backend", "local", "--budget", "1", "--plan", plan_file(root, 5)]
            assert main([*launch, "--wait"]) == 0  # an earlier run, left unfetched
            (first,) = [r.run_id for r in registry.all()]
            code, launched = printed([*launch, "--wait", "--fetch", "--dest", str(dest)])
            assert code == 0, launched
            (second,) = [r.run_id for r in registry.all() if r.run_id != first]
            fetched_by_launch = sorted(p.name for p in dest.iterdir() if p.name != ".gitignore")
            code, status = printed(["status", "--json"])
            assert code == 0, status
            assert main(["fetch", first, "--dest", str(dest)]) == 0
        return {
            "dest": str(dest),
            "run_ids": [first, second],
            "launch_printed": launched,
            "fetched_by_launch": fetched_by_launch,
            "status_json": json.loads(status),
        }

    return made_once("two-local-runs", make)


@pytest.fixture(scope="session")
def built_kernel_runs(made_once) -> dict:
    """Two local runs of the example kernel with a build step, made once for the session in
    an environment of its own (a launch with a user's kernel is ~6 s of CPU; issue 31): the
    first, of the commit that adds the build, launched --trusted and fetched, so its build
    enters the cache; the second, after a commit that edits the kernel, an A/B against that
    first commit (--baseline HEAD~1): the baseline's tree is the first run's, the
    candidate's a new one. The kernel notes the folder its worker runs in (a file written
    into its own tree). The first is fetched from inside the repository, into its
    results/. test_user_kernel reads the first run as the example's plain run and
    the second as the A/B; test_user_kernel_build the build cache of the two. Returns the
    runs' folders in the store and their sandboxes, and the two commits."""
    from orchestrator.cli import main
    from tests.e2e.test_user_kernel import WORKER_NOTES_ITS_FOLDER, example_repository, git
    from tests.e2e.test_user_kernel_build import BUILD_SCRIPT, launch, run_ids, with_build

    def make(root: Path) -> dict:
        with own_bench_env(root):
            repo = example_repository(root)
            (repo / "build_it.py").write_text(BUILD_SCRIPT)
            (repo / ".gitignore").write_text("simple_attention/_built.py\n")
            ops = repo / "simple_attention" / "ops.py"
            built = "\nfrom simple_attention._built import BUILT  # noqa\n"
            ops.write_text(ops.read_text() + built + WORKER_NOTES_ITS_FOLDER)
            with_build(repo, "python build_it.py")
            git(repo, "add", "-A")
            git(repo, "commit", "-qm", "built in place")
            _, first = launch(root, root, repo)
            first_id = run_ids(root)[-1]
            # Fetched from the repository, as its README has one work: into its results/,
            # which must not make the next run's tree `+dirty` (issue 52).
            os.chdir(repo)
            assert main(["fetch", first_id]) == 0  # a trusted run: its build is cached
            os.chdir(root / "work")
            ops.write_text(ops.read_text() + "# an edit: another tree\n")
            git(repo, "commit", "-qam", "an edit")
            _, second = launch(root, root, repo, "--baseline", "HEAD~1")
            sandboxes = root / "state" / "sandboxes"
            return {
                "first": str(first),
                "first_sandbox": str(sandboxes / first_id),
                "sandboxes": str(sandboxes),
                "second": str(second),
                "commits": [git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")],
            }

    return made_once("built-kernel-runs", make)
