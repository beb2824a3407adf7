"""A user's kernel repository end to end on the CPU (issue 29's acceptance): the plain-PyTorch
example copied outside bench, made a git repository, launched with --kernel, then an A/B
against its previous commit (two runs shared with test_user_kernel_build.py, made once:
tests/e2e/conftest.py); then a kernel that writes into its input. A build that fails is in
test_user_kernel_build.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import CorrectnessRow, Manifest, SummaryRow
from results_schema.csvio import read_rows
from tests.e2e.test_local_run import only_run_id, small_plan, store_run_dir

pytestmark = pytest.mark.timeout(300)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch-attention"
NAME = "torch-attention"  # its bench-kernel.toml's name
# Appended to the example's ops.py: the kernel notes the folder its worker runs in.
WORKER_NOTES_ITS_FOLDER = (
    "\nimport os as _os, pathlib as _pathlib\n"
    "(_pathlib.Path(__file__).resolve().parents[1] / 'worker-cwd.txt').write_text(_os.getcwd())\n"
)


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", "-C", str(repo), *identity, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def example_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "my-attention"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "my attention")
    return repo


def launch(bench_env: Path, tmp_path: Path, repo: Path, *extra: str) -> tuple[Manifest, Path]:
    plan = small_plan(tmp_path, samples=6)
    args = ["launch", "--backend", "local", "--kernel", str(repo), "--plan", str(plan)]
    assert main([*args, "--budget", "1", "--wait", *extra]) == 0
    state = bench_env / "state"
    run_dir = store_run_dir(state, only_run_id(state))
    return Manifest.model_validate_json((run_dir / "manifest.json").read_text()), run_dir


def rows(run_dir: Path, name: str, model):
    return read_rows(run_dir / "results" / name, model)


def test_the_example_kernel_is_timed_against_sdpa_under_its_name_and_commit(built_kernel_runs):
    """The shared runs' first (tests/e2e/conftest.py): the example, with a build step."""
    run_dir = Path(built_kernel_runs["first"])
    commit = built_kernel_runs["commits"][0]
    manifest = Manifest.model_validate_json((run_dir / "manifest.json").read_text())

    assert manifest.status == "complete"
    (kernel,) = manifest.plan.user_kernels
    assert (kernel.identity, manifest.plan.candidate) == (NAME, NAME)
    assert kernel.source.commit == commit and not kernel.source.dirty
    summary = rows(run_dir, "summary.csv", SummaryRow)
    against_sdpa = [r for r in summary if r.implementation == "sdpa" and r.versus == NAME]
    assert len(against_sdpa) == len(manifest.plan.configs)
    assert all(r.verdict is not None for r in against_sdpa)
    ours = [r for r in summary if r.implementation == NAME]
    assert {r.backend for r in ours} == {f"user:{NAME}@{kernel.source.commit[:12]}"}
    assert "flash" not in manifest.plan.identities
    # The harness and its workers run from one folder shared by every run here, not the
    # run's own: cuDNN's runtime-compiled kernels are cached per working directory.
    (noted,) = Path(built_kernel_runs["first_sandbox"]).glob("payload/*/worker-cwd.txt")
    assert Path(noted.read_text()) == Path(built_kernel_runs["sandboxes"]) / ".harness"


def test_baseline_head_1_compares_two_commits_of_the_users_repository(built_kernel_runs):
    """The shared A/B run (tests/e2e/conftest.py): the example, with a build step, against
    its previous commit (--baseline HEAD~1)."""
    run_dir = Path(built_kernel_runs["second"])
    previous, head = built_kernel_runs["commits"]
    manifest = Manifest.model_validate_json((run_dir / "manifest.json").read_text())

    assert manifest.status == "complete"
    comparison = manifest.plan.comparison
    assert (comparison.baseline, comparison.source) == (f"{NAME}@baseline", "git")
    assert comparison.commit == previous
    assert manifest.plan.user_kernel(NAME).source.commit == head
    # The first run was fetched into the repository's results/ before this launch: bench's
    # own outputs are no edit of the user's (issue 52).
    assert not manifest.plan.user_kernel(NAME).source.dirty
    baseline = manifest.plan.user_kernel(f"{NAME}@baseline")
    assert baseline.source.commit == comparison.commit
    summary = rows(run_dir, "summary.csv", SummaryRow)
    ab = [r for r in summary if r.implementation == f"{NAME}@baseline"]
    assert len(ab) == len(manifest.plan.configs) and all(r.versus == NAME for r in ab)
    assert {r.backend for r in ab} == {f"user:{NAME}@{comparison.commit[:12]}"}
    assert {o.identity for o in manifest.comparison} >= {f"{NAME}@baseline", "sdpa"}


def test_a_kernel_that_writes_into_its_input_fails_the_gate_and_sdpa_is_still_measured(
    bench_env, tmp_path
):
    """The foreign-code gate on a user's kernel, through the one path every implementation
    takes: the right answer, but the caller's k doubled afterwards."""
    repo = example_repository(tmp_path)
    ops = repo / "simple_attention" / "ops.py"
    right = "    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)\n"
    assert right in ops.read_text()
    scribbles = "    out = " + right.removeprefix("    return ") + "    k.mul_(2)\n    return out\n"
    ops.write_text(ops.read_text().replace(right, scribbles))
    git(repo, "commit", "-qam", "scribbles on k")
    manifest, run_dir = launch(bench_env, tmp_path, repo)

    assert manifest.status == "complete"
    gate = rows(run_dir, "correctness.csv", CorrectnessRow)
    ours = [r for r in gate if r.implementation == NAME]
    assert ours and {r.message for r in ours} == {"modified its input k"}
    assert all(r.passed for r in gate if r.implementation != NAME)
    measured = {r.implementation for r in rows(run_dir, "summary.csv", SummaryRow)}
    assert "sdpa" in measured and NAME not in measured
