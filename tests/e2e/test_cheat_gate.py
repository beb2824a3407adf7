"""The CI gate (docs/ci/README.md) against cheats of tests/cheats, through the real CLI on the
local backend: the pull request's kernel launched with `--baseline HEAD~1`, its honest
previous revision (SDPA alone, no build step), and `--fail-on slower`. Before issue 48 the
timer patch and garbage-while-timed both passed that gate (exit 0, judged 19.7x and 300x
faster). Now each exits 8, the candidate's row failed with the line that says why (a
regression, exit 6, would do too: never 0). A candidate whose build edits its baseline must
get the run refused, naming the baseline. The runner-level suite is
tests/unit/test_cheat_suite.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import CorrectnessRow, Manifest
from results_schema.csvio import read_rows
from tests.e2e.test_gate import CPU_MARGIN
from tests.e2e.test_gce_cli import launched_run_id
from tests.e2e.test_local_run import small_plan, store_run_dir
from tests.e2e.test_user_kernel import git

pytestmark = pytest.mark.timeout(600)

CHEATS = Path(__file__).resolve().parents[1] / "cheats"
HONEST_OPS = CHEATS / "sdpa_inside" / "cheat" / "ops.py"


def cheat_repository(tmp_path: Path, folder: str) -> Path:
    """A git repository of tests/cheats/FOLDER whose HEAD~1 is its honest revision (its
    module SDPA alone, its contract without a build step) and whose HEAD is the cheat."""
    repo = tmp_path / folder
    shutil.copytree(CHEATS / folder, repo, ignore=shutil.ignore_patterns("__pycache__"))
    ops, contract = repo / "cheat" / "ops.py", repo / "bench-kernel.toml"
    cheat = {path: path.read_bytes() for path in (ops, contract)}
    ops.write_bytes(HONEST_OPS.read_bytes())
    lines = contract.read_text().splitlines(keepends=True)
    contract.write_text("".join(line for line in lines if not line.startswith("build =")))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the honest revision")
    for path, data in cheat.items():
        path.write_bytes(data)
    git(repo, "commit", "-qam", "the cheat")
    return repo


def gate(tmp_path: Path, capsys, monkeypatch, repo: Path) -> tuple[int, Path]:
    """The recipe's launch of `repo` against HEAD~1, gated at the CPU's margin
    (tests/e2e/test_gate.py says why 25%), on cpu-smoke's two largest configs (a few ms a
    call: a twentieth of the timer patch's 3 ms more is less than an honest call there,
    as on a GPU's real shapes): (exit code, the fetched run's folder)."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    dest = tmp_path / "results"
    plan = small_plan(tmp_path, samples=6, heavy=True)
    args = ["launch", "--backend", "local", "--kernel", str(repo), "--baseline", "HEAD~1"]
    args += ["--plan", str(plan), "--budget", "1", "--wait"]
    args += ["--fail-on", "slower", "--margin", CPU_MARGIN, "--dest", str(dest)]
    code = main(args)
    return code, dest / launched_run_id(capsys)


@pytest.mark.parametrize(
    ("cheat", "seen"),
    [
        ("timer_patch", "its process reported"),
        ("garbage_while_timed", "in the rows checked"),
    ],
    ids=["timer_patch", "garbage_while_timed"],
)
def test_the_ci_gate_fails_a_cheating_pull_request(
    bench_env, tmp_path, capsys, monkeypatch, cheat, seen
):
    repo = cheat_repository(tmp_path, cheat)
    code, run_dir = gate(tmp_path, capsys, monkeypatch, repo)

    assert code in (6, 8), (run_dir / "gate.md").read_text()
    if code == 8:
        markdown = (run_dir / "gate.md").read_text()
        assert markdown.startswith("### bench gate: candidate INCORRECT (exit 8)")
        name = cheat.replace("_", "-")
        checks = read_rows(run_dir / "results" / "timed_checks.csv", CorrectnessRow)
        failed = [r for r in checks if r.implementation == name and not r.passed]
        assert failed and all(r.stage == "timing" and seen in r.message for r in failed), failed
        honest = [r for r in checks if r.implementation == f"{name}@baseline"]
        assert honest and all(r.passed for r in honest)


def test_a_build_that_edits_the_baseline_gets_the_run_refused_naming_it(
    bench_env, tmp_path, capsys, monkeypatch
):
    """baseline_tamper's build appends a 3 ms sleep to ../user_kernel_baseline/cheat/ops.py,
    the revision the gate trusts, before that is built and timed."""
    repo = cheat_repository(tmp_path, "baseline_tamper")
    args = ["launch", "--backend", "local", "--kernel", str(repo), "--baseline", "HEAD~1"]
    args += ["--plan", str(small_plan(tmp_path, samples=4)), "--budget", "1", "--wait"]
    main(args)
    state = bench_env / "state"
    from orchestrator.registry import RunRegistry

    run_id = RunRegistry(state / "runs.sqlite").all()[-1].run_id
    manifest = Manifest.model_validate_json(
        (store_run_dir(state, run_id) / "manifest.json").read_text()
    )
    assert manifest.status == "failed", manifest.status
    assert "user_kernel_baseline" in (manifest.reason or ""), manifest.reason
