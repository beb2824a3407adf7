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
    of CPU; tests/conftest.py) in an environment of their own, as bench_env makes one, at 80
    columns: the first launched with --wait and left unfetched, the second with --wait
    --fetch into `dest`, what that launch printed (stdout, stderr) and fetched and what
    `status --json` said then kept; then the first fetched beside the second.
    test_launch_fetch reads what the launch did, test_eighty_columns what it printed,
    test_history the two fetched runs (copies: the tests never write into these)."""
    from orchestrator.cli import main
    from orchestrator.registry import RunRegistry
    from tests.e2e.test_gce_cli import plan_file

    def make(root: Path) -> dict:
        dest = root / "results"
        registry = RunRegistry(root / "state" / "runs.sqlite")
        with own_bench_env(root), pytest.MonkeyPatch.context() as env:
            env.setenv("COLUMNS", "80")  # test_eighty_columns reads what the launch printed
            launch = ["launch", "--backend", "local", "--budget", "1", "--plan", plan_file(root, 5)]
            assert main([*launch, "--wait"]) == 0  # an earlier run, left unfetched
            (first,) = [r.run_id for r in registry.all()]
            code, launched, launch_err = printed(
                main, [*launch, "--wait", "--fetch", "--dest", str(dest)]
            )
            assert code == 0, launched + launch_err
            (second,) = [r.run_id for r in registry.all() if r.run_id != first]
            fetched_by_launch = sorted(p.name for p in dest.iterdir() if p.name != ".gitignore")
            code, status, _ = printed(main, ["status", "--json"])
            assert code == 0, status
            assert main(["fetch", first, "--dest", str(dest)]) == 0
        return {
            "dest": str(dest),
            "run_ids": [first, second],
            "launch_printed": launched,
            "launch_err": launch_err,
            "fetched_by_launch": fetched_by_launch,
            "status_json": json.loads(status),
        }

    return made_once("two-local-runs", make)


def printed(main, args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of bench's main called with args."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def gated_slower_run(made_once) -> dict:
    """One real local run of test_ab's A/B (sdpa-math against sdpa) gated at the CPU's
    margin, as test_gate.gate_run launches it, made once for the session at 80 columns in
    an environment of its own. test_gate's slower candidate reads its verdict, test_ab its
    comparison (fetched from a copy of its state), test_eighty_columns what its launch
    printed and what the commands around it print in a copy of its state. Each launched
    this same run of its own before (a launch is ~6 s of CPU). Returns the folder (its
    state, config and results), the launch's arguments and exit code, the run id and
    folder, the step summary and what the launch printed (stdout and stderr)."""
    from orchestrator.cli import main
    from tests.e2e.test_ab import BASELINE, CANDIDATE
    from tests.e2e.test_gate import gated_launch_args

    def make(root: Path) -> dict:
        summary = root / "step-summary.md"
        with own_bench_env(root), pytest.MonkeyPatch.context() as env:
            env.setenv("COLUMNS", "80")
            env.setenv("GITHUB_STEP_SUMMARY", str(summary))
            env.setenv("OMP_NUM_THREADS", "1")  # the local run inherits it (test_gate.py)
            dest = root / "results [/]x"  # printed as written: as markup it would not parse
            args = gated_launch_args(root / "work", CANDIDATE, BASELINE, dest)
            code, out, err = printed(main, args)
        launched = next(line for line in out.splitlines() if "launched run" in line)
        run_id = launched.split("launched run ")[1].split()[0]
        return {
            "root": str(root),
            "code": code,
            "run_id": run_id,
            "run_dir": str(dest / run_id),
            "summary": summary.read_text(),
            "launch_printed": out + err,
            "launch_args": args,
        }

    return made_once("gated-slower-run", make)


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
