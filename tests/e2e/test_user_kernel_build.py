"""A user's kernel end to end on the CPU, around its build and its names: the build cache
(a later run of the same tree restores the build's outputs and skips the build, a changed
tree builds again), a failed build named in one line by `bench status` and `bench report`,
the plan of the kernel's own, and the report and plots naming the kernel by its declared
name and commit, never as our kernel."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from results_schema import CorrectnessRow, Manifest, SummaryRow
from tests.e2e.test_local_run import small_plan, store_run_dir
from tests.e2e.test_user_kernel import NAME, example_repository, git, rows

pytestmark = pytest.mark.timeout(300)

# An in-place build: it writes a module the kernel imports, so the gate passes only where
# the build (or the cache) left it in the tree.
BUILD_SCRIPT = """\
from pathlib import Path

print("compiling simple_attention/_built.py")
Path("simple_attention/_built.py").write_text("BUILT = True\\n")
"""


def run_ids(bench_env: Path) -> list[str]:
    return [r.run_id for r in RunRegistry(bench_env / "state" / "runs.sqlite").all()]


def launch(bench_env: Path, tmp_path: Path, repo: Path, *extra: str) -> tuple[Manifest, Path]:
    """One local run of the repository's kernel (--trusted: its build may enter the cache
    at fetch, whatever CI says); its manifest and its folder in the store."""
    plan = ["--plan", str(small_plan(tmp_path, samples=6))] if "--own-plan" not in extra else []
    extra = tuple(e for e in extra if e != "--own-plan")
    args = ["launch", "--backend", "local", "--kernel", str(repo), *plan, "--trusted"]
    assert main([*args, "--budget", "1", "--wait", *extra]) == 0
    run_dir = store_run_dir(bench_env / "state", run_ids(bench_env)[-1])
    return Manifest.model_validate_json((run_dir / "manifest.json").read_text()), run_dir


def with_build(repo: Path, build: str) -> None:
    contract = repo / "bench-kernel.toml"
    entry = 'entry = "simple_attention.ops:attention"'
    contract.write_text(contract.read_text().replace(entry, f"{entry}\nbuild = '''{build}'''"))


def manifest_of(run_dir: Path) -> Manifest:
    return Manifest.model_validate_json((run_dir / "manifest.json").read_text())


def test_a_later_run_of_the_same_tree_restores_its_build_and_a_changed_tree_builds(
    built_kernel_runs,
):
    """The first of the shared runs (tests/e2e/conftest.py) builds its tree, and its fetch
    caches the build; the second, an A/B, meets that tree again as its baseline: restored
    from the cache, its build command skipped, its gate passing on the module the cache put
    back; its candidate, an edited tree, builds."""
    first_dir, second_dir = Path(built_kernel_runs["first"]), Path(built_kernel_runs["second"])
    (built,) = manifest_of(first_dir).user_builds
    assert (built.identity, built.outcome) == (NAME, "built") and built.cache_key
    assert "compiling" in (first_dir / "logs" / "startup.log").read_text()

    second = {b.identity: b for b in manifest_of(second_dir).user_builds}
    baseline, candidate = second[f"{NAME}@baseline"], second[NAME]
    assert (baseline.outcome, baseline.cache_key) == ("cached", built.cache_key)
    assert candidate.outcome == "built"
    assert candidate.cache_key and candidate.cache_key != built.cache_key
    log = (second_dir / "logs" / "startup.log").read_text()
    assert f"build: cache hit {built.cache_key} ({NAME}@baseline)" in log
    assert log.count("compiling") == 1  # the candidate's build alone ran
    gate = rows(second_dir, "correctness.csv", CorrectnessRow)
    for identity in second:
        ours = [r for r in gate if r.implementation == identity]
        assert ours and all(r.passed for r in ours), [r.message for r in ours]


def test_a_failed_build_fails_that_kernel_alone_and_is_one_line_in_status_and_report(
    bench_env, tmp_path, capsys
):
    """One run (a launch is ~10 s of CPU): the kernel's gate rows fail with its build's last
    line, SDPA is still measured, and `bench status` and `bench report` say it in one line."""
    repo = example_repository(tmp_path)
    # Its last line carries rich markup and a terminal escape: printed as text, inert.
    with_build(repo, r"echo compiling; printf 'error: [bold]no nvcc\033[2J\n' >&2; exit 3")
    manifest, run_dir = launch(bench_env, tmp_path, repo)
    assert manifest.status == "complete"
    assert manifest.plan.user_kernels[0].source.dirty  # the contract's edit was not committed
    (failed,) = manifest.user_builds
    assert (failed.outcome, failed.message) == ("failed", "error: [bold]no nvcc\x1b[2J")
    gate = rows(run_dir, "correctness.csv", CorrectnessRow)
    ours = [r for r in gate if r.implementation == NAME]
    assert ours and all(not r.passed for r in ours)
    assert {r.message for r in ours} == {"build failed: error: [bold]no nvcc\x1b[2J"}
    measured = {r.implementation for r in rows(run_dir, "summary.csv", SummaryRow)}
    assert "sdpa" in measured and NAME not in measured
    assert "build failed: error: [bold]no nvcc" in (run_dir / "logs" / "startup.log").read_text()
    expected = f"{NAME}: build failed: error: [bold]no nvcc\\x1b[2J"
    run_id = run_ids(bench_env)[-1]
    capsys.readouterr()

    assert main(["status", run_id]) == 0
    status = capsys.readouterr().out
    assert f"{run_id}: {expected}" in status and "\x1b" not in status
    assert main(["status", run_id, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["runs"]
    assert listed["build_failures"] == [f"{NAME}: build failed: error: [bold]no nvcc\x1b[2J"]

    assert main(["fetch", run_id]) == 0
    capsys.readouterr()
    assert main(["report", run_id]) == 0
    report = capsys.readouterr().out
    assert [line for line in report.splitlines() if "build failed" in line] == [expected]
    assert "\x1b" not in report and "sdpa" in report


def test_the_kernels_own_plan_runs_and_the_report_names_it_by_name_and_commit(
    bench_env, tmp_path, capsys, monkeypatch
):
    """No --plan: the plan bench-kernel.toml names. The tree is dirty (the plan file and the
    contract's edit are not committed): the report and the plots say '+dirty'."""
    repo = example_repository(tmp_path)
    plan = json.loads(small_plan(tmp_path, name="my-shapes", samples=6).read_text())
    plan.update(candidate=NAME, compared_with=["sdpa", "reference"], control=None)
    (repo / "shapes.json").write_text(json.dumps(plan))
    contract = repo / "bench-kernel.toml"
    entry = 'entry = "simple_attention.ops:attention"'
    contract.write_text(contract.read_text().replace(entry, f'{entry}\nplan = "shapes.json"'))
    manifest, _ = launch(bench_env, tmp_path, repo, "--own-plan")
    assert manifest.status == "complete" and manifest.plan.name == "my-shapes"
    (kernel,) = manifest.plan.user_kernels
    label = f"{git(repo, 'rev-parse', 'HEAD')[:12]}+dirty"
    assert kernel.source.label() == label
    run_id = run_ids(bench_env)[-1]
    assert main(["fetch", run_id]) == 0
    capsys.readouterr()

    assert main(["report", run_id]) == 0  # 80 columns: a pipe's width
    narrow = capsys.readouterr().out
    assert [line for line in narrow.splitlines() if len(line) > 80 and "plot: " not in line] == []
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["report", run_id]) == 0
    report = capsys.readouterr().out
    assert f"candidate {NAME} ({label})" in report
    assert re.search(rf"^\s+{re.escape(NAME)} \({re.escape(label)}\)", report, re.MULTILINE)
    assert "flash" not in report.replace("sdpa (flash)", "")

    from orchestrator import report as report_module

    run = report_module.load_run(Path("results") / run_id)
    summary = [r for r in run.summary if r.implementation == NAME]
    assert summary and {r.backend for r in summary} == {f"user:{NAME}@{label}"}
    plt = report_module.load_pyplot()
    fig = report_module.plots.tflops_figure(plt, run)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    title = fig._suptitle.get_text()
    plt.close(fig)
    assert f"{NAME} ({label})" in legend and f"candidate {NAME} ({label})" in title
    assert not [text for text in [*legend, title] if "flash" in text and "sdpa" not in text]
    csv_rows = rows(Path("results") / run_id, "summary.csv", SummaryRow)
    assert {r.implementation for r in csv_rows} == {NAME, "sdpa", "reference"}


# A build that also saves candidates under its own run's key, as any code on the machine
# can (store_put and RUN_KEY are the startup script's): the environment every later run
# restores, our kernel's build, another tree's build under this kernel's name, an old kind.
PLANTED = (
    "env/env-0123456789abcdef01234567",
    f"user-kernels/flash-{'1' * 24}-{'2' * 24}",
    f"user-kernels/{NAME}-{'3' * 24}-{'4' * 24}",
    "kernels/k-sm_89",
)
# The planted bytes lie in the build's own tree: a file written outside it would fail the
# run before the gate (the payload's trees are checked: benches/confinement.py).
PLANT = "printf x > planted && for key in {}; do {}; done".format(
    " ".join(PLANTED),
    'store_put planted "$RUN_KEY/cache/$key.tar.tar"'
    ' && store_put planted "$RUN_KEY/cache/$key.sha256"',
)


def test_a_kernel_runs_fetch_promotes_its_own_build_alone_and_says_what_it_did(
    bench_env, tmp_path, capsys
):
    """A trusted --kernel run's build plants candidates beside its own build's: `bench
    fetch` promotes the build under the key the controller derives for the tree, refuses
    every other entry, and prints one line for each."""
    repo = example_repository(tmp_path)
    (repo / "build_it.py").write_text(BUILD_SCRIPT)
    with_build(repo, f"python build_it.py && {PLANT}")
    manifest, run_dir = launch(bench_env, tmp_path, repo)
    (built,) = manifest.user_builds
    assert built.outcome == "built" and built.cache_key
    capsys.readouterr()
    assert main(["fetch", run_ids(bench_env)[-1]]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if "cache:" in line]

    cache = run_dir.parents[1] / "cache"
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*.*")) == sorted(
        f"{built.cache_key}{suffix}" for suffix in (".sha256", ".tar.zst" if zstd() else ".tar.tar")
    )
    only_ours = (
        f"comes only from runs that build nothing but bench's own kernel; this run built {NAME}"
    )
    no_key = f"no key bench derives for this run's trees ({NAME})"
    assert sorted(printed) == sorted(
        f"bench: cache: {line}"
        for line in (
            f"promoted {built.cache_key}: {NAME}'s build",
            f"refused {PLANTED[0]}: the environment {only_ours}",
            f"refused {PLANTED[1]}: {no_key}",
            f"refused {PLANTED[2]}: {no_key}",
            f"refused {PLANTED[3]}: no cache entry's name (env/KEY or user-kernels/KEY)",
        )
    )


def zstd() -> bool:
    return shutil.which("zstd") is not None
