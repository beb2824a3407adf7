"""Many candidates, one run (issue 54), end to end on the CPU: a user's repository declaring
variants in its bench-kernel.toml ([kernel.variants], each selected by its env) plus a
revision named with --candidates, all gated and timed in one local run, interleaved in
every round; a variant that cheats (the cheat suite's NaN wildcard, tests/cheats) and one
whose build fails each fail alone, and the others are timed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import CorrectnessRow, Measurement, SummaryRow
from results_schema.program_output import FetchOutput, LaunchOutput
from tests.e2e.test_user_kernel import example_repository, git
from tests.e2e.test_user_kernel_build import launch

pytestmark = pytest.mark.timeout(300)

CHEATS = Path(__file__).resolve().parents[1] / "cheats"
NAME = "torch-attention"
# The entry: the honest example, or the cheat suite's NaN wildcard, by the variant's env.
DISPATCH = """\
import os

if os.environ.get("KERNEL_CHOICE") == "cheat":
    from cheat.ops import attention  # noqa: F401
else:
    from simple_attention.ops import attention  # noqa: F401
"""
# The build reads the variant's env: FAIL_BUILD=1 fails it, with a last line that says so.
# It takes BUILD_SECONDS, and prints when it started and ended into its tree's build log.
BUILD_SECONDS = 3
BUILD = f"""\
import os
import sys
import time

print("started", time.time())
time.sleep({BUILD_SECONDS})
print("ended", time.time())
if os.environ.get("FAIL_BUILD") == "1":
    print("this variant's block size does not fit")
    sys.exit(3)
print("built", os.environ.get("KERNEL_CHOICE"))
"""
VARIANTS = """
[kernel.variants]
honest = { env = { KERNEL_CHOICE = "honest" } }
cheat = { env = { KERNEL_CHOICE = "cheat" } }
broken = { env = { KERNEL_CHOICE = "honest", FAIL_BUILD = "1" } }
"""


def variant_repository(tmp_path: Path) -> tuple[Path, str]:
    """The torch example with the NaN-wildcard cheat beside it, a dispatching entry and a
    build that reads the env; committed twice (the first commit is the --candidates one).
    Returns the repository and the first commit."""
    repo = example_repository(tmp_path)
    shutil.copytree(CHEATS / "nan_wildcard" / "cheat", repo / "cheat")
    (repo / "pick.py").write_text(DISPATCH)
    (repo / "build_check.py").write_text(BUILD)
    contract = repo / "bench-kernel.toml"
    text = contract.read_text().replace(
        'entry = "simple_attention.ops:attention"',
        'entry = "pick:attention"\nbuild = "python build_check.py"',
    )
    contract.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one kernel, two implementations")
    first = git(repo, "rev-parse", "HEAD")
    contract.write_text(text.replace("[kernel.supports]", VARIANTS + "\n[kernel.supports]"))
    git(repo, "commit", "-qam", "variants")
    return repo, first


def test_variants_and_a_revision_are_timed_together_and_a_cheat_or_a_failed_build_fails_alone(
    bench_env, tmp_path, capsys
):
    repo, first = variant_repository(tmp_path)
    manifest, run_dir = launch(bench_env, tmp_path, repo, "--candidates", first, "--json")
    launched = capsys.readouterr()

    honest, cheat, broken = (f"{NAME}[{v}]" for v in ("honest", "cheat", "broken"))
    revision = f"{NAME}@{first[:7]}"
    plan = manifest.plan
    assert manifest.status == "complete"
    assert (plan.candidate, plan.variants) == (honest, [cheat, broken, revision])
    # Each env variant builds in its own copy of the tree, with its env.
    folders = {k.identity: k.directory for k in plan.user_kernels}
    assert len(set(folders.values())) == 4
    builds = {b.identity: b for b in manifest.user_builds}
    assert builds[broken].outcome == "failed"
    assert builds[broken].message == "this variant's block size does not fit"
    assert {builds[i].outcome for i in (honest, cheat, revision)} == {"built"}
    # Trees that differ build at once: each build's span overlaps every other's (one after
    # the other, the four would take 4 × BUILD_SECONDS).
    spans = [build_span(bench_env, manifest.run_id, folder) for folder in folders.values()]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans

    gate = read(run_dir, "correctness.csv", CorrectnessRow)
    failed = {r.implementation: r.message for r in gate if not r.passed}
    assert set(failed) == {cheat, broken}
    assert "non-finite output elements" in failed[cheat]
    assert "build failed: this variant's block size does not fit" in failed[broken]

    timed = set(plan.identities) - {cheat, broken}
    assert {honest, revision, "sdpa"} <= timed
    # A worker the timing loses (on a loaded machine the timer-patch check can misread one)
    # leaves that config with a row saying why: it is no result, and no round holds it.
    checks = read(run_dir, "timed_checks.csv", CorrectnessRow)
    lost = {(r.config, r.implementation) for r in checks if not r.passed}
    summary = read(run_dir, "summary.csv", SummaryRow)
    for config in plan.configs:
        expected = {name for name in timed if (config.name, name) not in lost}
        assert {r.implementation for r in summary if r.config == config.name} == expected
    # Every timed implementation in every round, each round in an order of its own.
    rounds: dict[tuple[str, int], list[str]] = {}
    for m in read(run_dir, "measurements.csv", Measurement):
        rounds.setdefault((m.config, m.round), []).append(m.implementation)
    for (config, _), names in rounds.items():
        assert set(names) == {name for name in timed if (config, name) not in lost}
    assert len({tuple(names) for names in rounds.values()}) > 1
    # For programs: stdout holds one JSON object, in its published schema; a person's
    # lines (printed as named: '[honest]' is no rich markup to swallow) go to stderr.
    (run,) = LaunchOutput.model_validate_json(launched.out).runs
    assert run.run_id == manifest.run_id and run.backend == "local"
    assert run.worst_case_usd == 0 and run.candidates == [honest, cheat, broken, revision]
    candidates = f"4 candidates, each gated and timed in every round: {honest}, {cheat},"
    assert candidates in launched.err
    # The plan's line counts what is timed: the four candidates and the peers, not the first
    # candidate alone (it read '3 implementations' beside 'eight candidates' on the GPU).
    others = [name for name in plan.implementations if name != plan.candidate]
    timed_line = f"× {len(plan.candidates) + len(others)} implementations (the 4 candidates"
    assert timed_line in launched.err.replace("\n", " ")
    assert main(["fetch", manifest.run_id, "--json"]) == 0
    fetched = capsys.readouterr()
    (got,) = FetchOutput.model_validate_json(fetched.out).runs
    assert (got.run_id, got.status, got.candidates) == (
        manifest.run_id,
        "complete",
        plan.candidates,
    )
    assert {r.implementation for r in got.summary} == {r.implementation for r in summary}
    assert {(r.implementation, r.message) for r in got.failures if r.implementation == cheat}
    assert {b.identity: b.outcome for b in got.builds}[broken] == "failed"
    assert honest in fetched.err and revision in fetched.err  # the summary, for a person


def build_span(bench_env: Path, run_id: str, folder: str) -> tuple[float, float]:
    """When a tree's build command started and ended, as it printed into its build log."""
    log = bench_env / "state" / "sandboxes" / run_id / "payload" / f"{folder}.build.log"
    words = [line.split() for line in log.read_text().splitlines()]
    times = {w[0]: float(w[1]) for w in words if len(w) == 2 and w[0] in ("started", "ended")}
    return times["started"], times["ended"]


def read(run_dir: Path, name: str, model):
    from results_schema.csvio import read_rows

    return read_rows(run_dir / "results" / name, model)


def test_a_budget_short_of_every_variant_is_refused_naming_how_many_it_covers(
    gce, bench_env, tmp_path, capsys
):
    """The runtime model counts each variant's gate and samples (their builds run at once,
    as long as the longest): a budget that covers some of twelve is refused (exit 3) before
    anything is created, in one line naming how many it covers; with that many declared,
    the same budget launches."""
    from orchestrator.registry import RunRegistry
    from tests.e2e.test_gce_cli import plan_file

    repo = example_repository(tmp_path)
    (repo / "build_check.py").write_text(BUILD)
    contract = repo / "bench-kernel.toml"
    base = contract.read_text().replace(
        'entry = "simple_attention.ops:attention"',
        'entry = "simple_attention.ops:attention"\nbuild = "python build_check.py"',
    )

    def declare(count: int) -> None:
        lines = "".join(f'b{i} = {{ env = {{ BLOCK_M = "{i}" }} }}\n' for i in range(count))
        text = base.replace("[kernel.supports]", f"[kernel.variants]\n{lines}\n[kernel.supports]")
        contract.write_text(text)

    declare(12)
    args = ["launch", "--backend", "gce", "--kernel", str(repo), "--budget", "0.12"]
    args += ["--plan", plan_file(tmp_path, samples=1000, heavy=True)]
    assert main(args) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "but the plan needs about" in line
    assert "(it covers 7 of the run's 12 candidates, the first through torch-attention[b6]" in line
    assert gce.inserted == [] and gce.instances() == []
    assert RunRegistry(bench_env / "state" / "runs.sqlite").all() == []
    declare(7)
    assert main(args) == 0


def test_a_sweep_times_every_variant_on_each_gpu_type_and_prints_its_runs_as_json(
    gce, tmp_path, capsys
):
    """`--gpu l4,t4` with variants: one VM per GPU type, each building and timing all of
    them (its startup script builds each variant's folder); --json prints both runs."""
    from tests.e2e.test_gce_cli import plan_file

    gce.config.run_scripts = False
    repo = example_repository(tmp_path)
    contract = repo / "bench-kernel.toml"
    variants = '[kernel.variants]\nb64 = { env = { BLOCK_M = "64" } }\nb128 = {}\n'
    text = contract.read_text()
    contract.write_text(text.replace("[kernel.supports]", variants + "\n[kernel.supports]"))
    args = ["launch", "--backend", "gce", "--gpu", "l4,t4", "--budget", "5.00", "--json"]
    assert main([*args, "--kernel", str(repo), "--plan", plan_file(tmp_path)]) == 0
    printed = capsys.readouterr()
    output = LaunchOutput.model_validate_json(printed.out)
    assert output.sweep_id and output.failed == [] and len(output.runs) == 2
    candidates = [f"{NAME}[b64]", f"{NAME}[b128]"]
    assert {run.gpu for run in output.runs} == {"l4", "t4"}
    assert all(run.candidates == candidates for run in output.runs)
    assert all(0 < run.worst_case_usd <= run.budget_usd for run in output.runs)
    assert sum(run.budget_usd for run in output.runs) <= 5.00
    assert "2 of 2 GPU types running" in printed.err
    for body in gce.inserted:
        (script,) = [i["value"] for i in body["metadata"]["items"] if i["key"] == "startup-script"]
        for folder, identity in zip(("a", "b"), candidates, strict=True):
            assert f"start_user_build user_kernel_variant_{folder} '{identity}'" in script
