"""No tree writes another (issue 48, item 2), on the local backend: the real startup script
runs a hostile kernel's build and worker as the user who launched it, so nothing keeps
them from the harness or the other trees there (docs/security.md). What still holds: each
tree and the harness are checked just before use against what launch packed, so an edit
of the baseline or the harness fails the run naming it, and nothing a build or a worker
starts outlives its step. The confined path (gce: an unprivileged user per tree) is
tests/e2e/test_confined_vm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from results_schema import Manifest
from tests.e2e.test_local_run import small_plan, store_run_dir
from tests.e2e.test_user_kernel import example_repository, git
from tests.e2e.test_user_kernel_build import with_build
from tests.processes import processes_running

pytestmark = pytest.mark.timeout(300)


def launched_digests(run_dir: Path) -> dict[str, str]:
    """Each tree's digest as launch packed it, from the run's payload in the store."""
    from orchestrator.boundary import read_payload

    return read_payload((run_dir / "payload.tar.gz").read_bytes())[1]


def launch_run(bench_env: Path, tmp_path: Path, repo: Path, *extra: str) -> tuple[Manifest, Path]:
    plan = small_plan(tmp_path, samples=4)
    args = ["launch", "--backend", "local", "--kernel", str(repo), "--plan", str(plan)]
    main([*args, "--budget", "1", "--wait", *extra])
    state = bench_env / "state"
    run_id = RunRegistry(state / "runs.sqlite").all()[-1].run_id
    run_dir = store_run_dir(state, run_id)
    return Manifest.model_validate_json((run_dir / "manifest.json").read_text()), run_dir


def test_what_a_build_and_a_worker_leave_running_is_ended_and_named(bench_env, tmp_path, marker):
    """The build double-forks a `sleep` into a session of its own, and so does the kernel's
    module when its worker imports it: neither is alive once the run ended, and the run's
    log and its manifest name each by pid and command line, with the step that left it."""
    repo = example_repository(tmp_path)
    with_build(repo, f"(setsid sleep {marker}1 &) ; echo built")
    ops = repo / "simple_attention" / "ops.py"
    ops.write_text(
        ops.read_text()
        + f"\nimport subprocess as _sp\n_sp.run(['sh', '-c', 'setsid sleep {marker}2 &'])\n"
    )
    git(repo, "commit", "-qam", "a kernel that leaves processes behind")

    manifest, run_dir = launch_run(bench_env, tmp_path, repo)

    assert manifest.status == "complete", manifest.reason
    assert processes_running(f"sleep {marker}") == {}
    sweeps = {(s.phase, s.tree): s for s in manifest.leftovers}
    build = sweeps[("build", "user_kernel")]
    # The command line as it was when it was stopped: the sleep, or the shell's fork of
    # itself a moment before it became the sleep.
    (left,) = build.processes
    assert f"sleep {marker}1" in left.command
    measure = sweeps[("measure", None)]
    assert any(f"sleep {marker}2" in p.command for p in measure.processes)
    log = (run_dir / "logs" / "startup.log").read_text()
    assert f"leftovers: build of user_kernel left 1 running; ended {left.pid} (" in log
    assert f"leftovers: measure left {measure.ended} running; ended " in log
    assert manifest.containment.kernel_users == {}  # the local backend drops no privileges
    assert "user who launched the run" in manifest.containment.note


def test_a_build_that_edits_the_baseline_fails_the_run_before_the_baseline_builds(
    bench_env, tmp_path
):
    """The candidate's build rewrites the baseline's module (the base branch a CI gate
    trusts) before the baseline is built: the baseline's check against launch's digest
    fails the run, in one line naming the tree."""
    repo = example_repository(tmp_path)
    git(repo, "commit", "-q", "--allow-empty", "-m", "the baseline")
    tamper = "printf 'SLOWER = True\\n' >> ../user_kernel_baseline/simple_attention/ops.py"
    with_build(repo, tamper)
    git(repo, "commit", "-qam", "a candidate that edits its baseline")

    manifest, run_dir = launch_run(bench_env, tmp_path, repo, "--baseline", "HEAD~1")

    assert manifest.status == "failed" and manifest.failed_phase == "build"
    assert "build: user_kernel_baseline changed since launch" in manifest.reason
    assert "before its build" in manifest.reason
    (check,) = [c for c in manifest.trees if c.tree == "user_kernel_baseline"]
    assert check.stage == "build" and not check.passed
    assert check.expected_sha256 == launched_digests(run_dir)["user_kernel_baseline"]


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (
            "printf '\\nCpuClock = None\\n' >> ../benches/timing.py",
            "measure: harness changed since launch",
        ),
        (
            'printf \'open("%s", "w").close()\\n\' "$PLANTED" > ../sitecustomize.py',
            "measure: the payload holds sitecustomize.py, which launch did not put there",
        ),
        (  # the folder the harness runs from, every run's: payload/user_kernel/../../..
            "mkdir -p ../../../.harness && "
            'printf \'open("%s", "w").close()\\n\' "$PLANTED" > ../../../.harness/numpy.py',
            "/.harness holds numpy.py, which the harness would import first",
        ),
    ],
    ids=["edits-the-timer", "plants-a-module-the-harness-would-import", "plants-in-its-folder"],
)
def test_a_build_that_touches_the_harness_fails_the_run_before_the_harness_runs(
    bench_env, tmp_path, monkeypatch, tamper, reason
):
    """The build edits bench's own timing module, or plants a module at the payload's root
    or in the folder the harness runs from (each on its import path): the checks just before
    it starts fail the run in one line, and nothing planted ran."""
    planted = tmp_path / "planted-module-ran"
    repo = example_repository(tmp_path)
    with_build(repo, tamper.replace("$PLANTED", str(planted)))
    git(repo, "commit", "-qam", "a build that touches the harness")

    manifest, _ = launch_run(bench_env, tmp_path, repo)

    assert manifest.status == "failed" and manifest.failed_phase == "correctness"
    assert reason in manifest.reason
    assert not planted.exists()
    if ".harness" not in reason:  # a check of the harness's tree: recorded as failed
        harness = [c for c in manifest.trees if c.tree == "harness"]
        assert harness and not harness[-1].passed
