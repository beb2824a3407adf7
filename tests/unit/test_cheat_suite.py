"""The cheat suite (issue 48), on the CPU: one small hostile kernel repository per hack that
kernel harnesses have met (tests/cheats/*/, each contract commented with what it tries and
what bench must answer), run through the real harness with real worker processes. Each
must end with its row failed, or the run refused, in one line naming what was seen, while
the honest kernels (the torch example, a kernel that only calls SDPA) pass unchanged.

Most cheats share one run (`cheat_run`): every kernel runs in a worker of its own, so one
cheat costs its own rows and nothing of the others'; the candidate is the honest SDPA
kernel. A forged results file fails its whole run, so that cheat runs alone. The CI gate on
the timer patch and on garbage-while-timed is tests/e2e/test_cheat_gate.py; cache planting
is tests/e2e/test_user_kernel_build.py's (a build that plants cache entries: only its own
tree's build is promoted); the GPU-only cheats are tests/gpu/test_cheat_suite_gpu.py.
docs/security.md ("The code under test") tables every cheat with what holds against it.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from benches import registry, runner, writers
from benches.user_kernel import register
from benches.writers import StatusWriter, read_csv
from orchestrator.kernel_tree.contract import read_contract
from results_schema import AttentionConfig, CorrectnessRow, Plan, SummaryRow
from results_schema.kernel_contract import KernelIdentity, UserKernel
from tests.limits import HANG_SECONDS
from tests.unit.test_isolation import cpu_plan

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
CHEATS = REPO / "tests" / "cheats"
EXAMPLE = REPO / "examples" / "torch-attention"
CANDIDATE = "sdpa-inside"  # tests/cheats/sdpa_inside: SDPA and nothing else
HONEST = {CANDIDATE: "sdpa_inside", "torch-attention": "torch_attention"}  # identity -> folder

# Head dims 16 and 32 (collapsed_shape collapses at 16); float32, which the CPU computes.
CONFIGS = [
    AttentionConfig(
        name="d16", batch=1, heads=2, seq_len=64, head_dim=16, dtype="float32", causal=True
    ),
    AttentionConfig(
        name="d32", batch=1, heads=2, seq_len=64, head_dim=32, dtype="float32", causal=False
    ),
]

GATE, TIMING, EITHER = "gate", "timing", "gate or timing"
WRONG_ROWS = r"sample \d+: (max error \S+ over tolerance \S+|\d+ non-finite elements) in the rows"
WRONG_OUTPUT = r"(\d+ non-finite output elements where the reference is finite|max error \S+)"

# cheat folder -> (where it must be caught, what its one line must say), on every config.
CAUGHT = {
    "timer_patch": (
        TIMING,
        r"its process reported \S+ ms a call where the harness measured \S+ ms",
    ),
    "garbage_while_timed": (TIMING, WRONG_ROWS),
    "output_cache": (TIMING, WRONG_ROWS),
    "batch_and_skip": (TIMING, WRONG_ROWS),
    "input_mutation": (TIMING, r"sample \d+: modified its input v"),
    "stale_memory": (GATE, WRONG_OUTPUT),
    "precision_downgrade": (GATE, r"max error \S+ over tolerance \S+"),
    "nan_wildcard": (GATE, r"\d+ non-finite output elements where the reference is finite"),
    "reads_expected": (GATE, WRONG_OUTPUT),
    "background_thread": (EITHER, f"({WRONG_OUTPUT}|{WRONG_ROWS})"),
}
OTHERS = ["stats_patch", "collapsed_shape"]  # asserted on their own below


def cheat_tree(root: Path, folder: str) -> Path:
    """tests/cheats/FOLDER (or the torch example) copied under `root`, as a payload holds it."""
    source = EXAMPLE if folder == "torch_attention" else CHEATS / folder
    tree = root / folder
    if not tree.exists():
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def cheat_kernel(
    root: Path, folder: str, identity: str | None = None, entry: str | None = None
) -> UserKernel:
    """The kernel a repository's bench-kernel.toml declares, as plan.json carries it (under
    another `identity` or `entry` point, for a second variant of one repository)."""
    tree = cheat_tree(root, folder)
    contract = read_contract((tree / "bench-kernel.toml").read_bytes(), folder)
    if entry is not None:
        contract = contract.model_copy(update={"entry": entry})
    return UserKernel(
        identity=identity or contract.name,
        directory=folder,
        contract=contract,
        source=KernelIdentity(tree_sha256="0" * 64),
    )


def cheat_plan(kernels: list[UserKernel], configs=CONFIGS, samples: int = 6) -> Plan:
    """The first kernel the candidate, compared with the others and SDPA, on the CPU."""
    return cpu_plan(kernels, configs, samples)


def run_plan(plan: Plan, root: Path, run_dir: Path, after=lambda: None) -> list[CorrectnessRow]:
    """The gate and the timing of `plan` (its kernels' trees under `root`), as the measure
    phase runs them; `after` runs once the timing is done, before the workers end. Returns
    the gate's rows."""
    register(plan, root)
    try:
        with runner.StopRequested() as stop:
            ctx = runner.RunContext(plan, run_dir, "r", StatusWriter(None, "r"), stop)
            runner.write_plan(run_dir, plan)
            gate = runner.run_correctness(ctx)
            environment = runner.load_or_write_environment(run_dir)
            runner.run_benchmark(ctx, gate, None, environment)
            after()
        return gate
    finally:
        for kernel in plan.user_kernels:
            impl = registry.IMPLEMENTATIONS.pop(kernel.identity, None)
            if getattr(impl, "worker", None) is not None:
                impl.worker.close()


@pytest.fixture(scope="session")
def cheat_run(made_once) -> Path:
    """One run of every cheat of CAUGHT and OTHERS beside the honest kernels (the SDPA one
    the candidate), made once for the session: its run folder."""

    def make(folder: Path) -> str:
        kernels = [
            cheat_kernel(folder, HONEST[CANDIDATE]),
            cheat_kernel(folder, HONEST["torch-attention"]),
            *(cheat_kernel(folder, cheat) for cheat in [*CAUGHT, *OTHERS]),
        ]
        run_plan(cheat_plan(kernels), folder, folder / "run")
        return str(folder / "run")

    return Path(made_once("cheat-suite-cpu", make))


def identity_of(folder: str) -> str:
    return read_contract((CHEATS / folder / "bench-kernel.toml").read_bytes(), folder).name


def results(run_dir: Path, name: str, model) -> list:
    return read_csv(run_dir / "results" / name, model)


def where_caught(run_dir: Path, identity: str, config: str) -> list[tuple[str, str]]:
    """(stage, message) of every failed row of `identity` on `config`: the gate's, then the
    timed checks' (whose messages lead with their stage)."""
    gate = [
        (GATE, r.message)
        for r in results(run_dir, "correctness.csv", CorrectnessRow)
        if (r.config, r.implementation) == (config, identity) and not r.passed
    ]
    timed = [
        (TIMING if r.stage == "timing" else r.stage, r.message.split(": ", 1)[1])
        for r in results(run_dir, "timed_checks.csv", CorrectnessRow)
        if (r.config, r.implementation) == (config, identity) and not r.passed
    ]
    return gate + timed


@pytest.mark.slow
@pytest.mark.parametrize("cheat", sorted(CAUGHT))
def test_each_cheat_fails_its_rows_naming_what_was_seen(cheat_run, cheat):
    stage, says = CAUGHT[cheat]
    identity = identity_of(cheat)
    for config in CONFIGS:
        caught = where_caught(cheat_run, identity, config.name)
        assert caught, f"{cheat} got through on {config.name}"
        (where, message), *_ = caught
        assert where in stage.split(" or "), (config.name, caught)
        assert re.fullmatch(f".*{says}.*", message), (config.name, message)
        assert "\n" not in message
    summary = [
        r for r in results(cheat_run, "summary.csv", SummaryRow) if r.implementation == identity
    ]
    assert all(r.flag == "wrong-timed-output" and r.verdict is None for r in summary), summary


def test_the_honest_kernels_pass_unchanged(cheat_run):
    """The torch example and the SDPA kernel beside the hostile ones: every check
    passed, every sample taken, no row flagged for its outputs."""
    summary = results(cheat_run, "summary.csv", SummaryRow)
    plan = Plan.model_validate_json((cheat_run / "plan.json").read_text())
    for identity in HONEST:
        for config in CONFIGS:
            assert where_caught(cheat_run, identity, config.name) == []
        rows = [r for r in summary if r.implementation == identity]
        assert len(rows) == len(CONFIGS), rows
        assert all(r.n == plan.samples_per_config and r.flag != "wrong-timed-output" for r in rows)
    checks = results(cheat_run, "timed_checks.csv", CorrectnessRow)
    assert {r.stage for r in checks if r.implementation in HONEST} == {"timed-first", "timed-last"}


def test_statistics_patched_in_the_kernels_process_change_nothing(cheat_run):
    """stats_patch makes every speedup 100x in its process and is really 1 ms a call
    slower: the harness's statistics see it slower than the honest candidate."""
    identity = identity_of("stats_patch")
    rows = [
        r for r in results(cheat_run, "summary.csv", SummaryRow) if r.implementation == identity
    ]
    assert len(rows) == len(CONFIGS)
    for row in rows:
        assert where_caught(cheat_run, identity, row.config) == []
        assert row.median_ms >= 1.0  # each call sleeps 1 ms
        assert row.versus == CANDIDATE and row.speedup > 1  # the candidate is faster
    overall = json.loads((cheat_run / "comparison.json").read_text())
    assert all(o["geomean"] < 100 for o in overall)


def test_a_shape_driven_to_nothing_leaves_the_geometric_mean(cheat_run):
    """collapsed_shape answers garbage at once at head dim 16 while timed: that config's
    row fails and gets no verdict (its samples, if any were kept, are flagged); the
    geometric mean counts only the honest config."""
    identity = identity_of("collapsed_shape")
    caught = where_caught(cheat_run, identity, "d16")
    assert caught and caught[0][0] == TIMING and re.match(WRONG_ROWS, caught[0][1]), caught
    assert where_caught(cheat_run, identity, "d32") == []
    summary = {
        r.config: r
        for r in results(cheat_run, "summary.csv", SummaryRow)
        if r.implementation == identity
    }
    assert "d32" in summary
    if "d16" in summary:
        assert summary["d16"].flag == "wrong-timed-output" and summary["d16"].verdict is None
    overall = json.loads((cheat_run / "comparison.json").read_text())
    assert all(o["configs"] <= 1 for o in overall if o["identity"] == identity), overall


@pytest.mark.slow
def test_results_rewritten_while_timed_fail_the_run_naming_the_file(tmp_path):
    """forged_results rewrites its rows of results/measurements.csv in place from its worker,
    smaller, at every call: the writer's check on closing the file refuses the run."""
    plan = cheat_plan([cheat_kernel(tmp_path, "forged_results")], CONFIGS[:1], samples=4)
    with pytest.raises(writers.ResultsChanged, match=r"results/measurements\.csv") as refused:
        run_plan(plan, tmp_path, tmp_path / "run")
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_results_rewritten_after_they_were_closed_are_refused_before_the_manifest(tmp_path):
    """forged_results' `after_close` leaves a thread in its worker that appends a row to
    results/summary.csv once the harness has written and closed it: the manifest, which
    vouches for the files, is refused naming the file."""
    kernel = cheat_kernel(tmp_path, "forged_results", "forged-after", "cheat.ops:after_close")
    plan = cheat_plan([kernel], CONFIGS[:1], samples=4)
    run_dir = tmp_path / "run"
    summary = run_dir / "results" / "summary.csv"

    def manifest_once_the_row_is_in() -> None:
        rows = len(results(run_dir, "summary.csv", SummaryRow))
        deadline = time.monotonic() + HANG_SECONDS
        while len(summary.read_bytes().splitlines()) <= rows + 1:
            assert time.monotonic() < deadline, "the worker's thread never wrote"
            time.sleep(0.05)
        writers.write_manifest(run_dir, "r", datetime.now(timezone.utc))

    with pytest.raises(writers.ResultsChanged, match=r"results/summary\.csv"):
        run_plan(plan, tmp_path, run_dir, after=manifest_once_the_row_is_in)
