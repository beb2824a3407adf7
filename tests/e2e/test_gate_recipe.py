"""The CI recipe (docs/ci/README.md) on the CPU as issue 49 tried it: a user's kernel
repository whose pull request is launched against `main` on the cpu-smoke plan, `--fail-on
slower` at the default margin, through the real CLI, real worker processes and the sampling
until decided (benches/sequential.py).

Before issue 49 a 25 % slower pull request passed this gate 4 times of 4 (exit 0, "no change
detected", 0.609x [0.32, 1.04]). Now it is a regression or undecided, never a pass; identical
trees pass or are undecided, never a regression. On this two-core machine the A/A control
(SDPA at microseconds a call) is not shown within 2 % even at 80 samples a config, so
identical trees are undecided there: the gate says so and what would decide it.

The kernel computes attention, then waits until the call has lasted a time of known median
(8 ms on `main`, 10 ms on the pull request: 25 % slower) spread lognormally (JITTER), so
that its slowdown is known whatever the load, one look cannot see it (as the issue's run
could not), and a call lasts long enough that the few milliseconds a loaded machine adds
around a call in a worker (issue 49 item 4) stay below half of it: the harness refuses a
kernel whose own time and the harness's disagree by more (exit 8 for an honest kernel).
Measured while writing this (2-core CPU, load about 1): 25 % slower exit 6 in 7 of 8 runs
(decided at look 2 or 3), 7 in 1; identical trees exit 7 in 8 of 8; the tree before issue
49 passed the slower one (exit 0) in 7 of 8.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import Measurement
from results_schema.csvio import read_rows
from results_schema.gate_report import GateReport
from tests.e2e.test_user_kernel import EXAMPLE, git

# A minute or more of waiting each (tests/conftest.py starts them first).
pytestmark = [pytest.mark.timeout(600), pytest.mark.long]

OPS = '''"""softmax(q k^T scale) v, then a wait until the call has lasted SECONDS_A_CALL
times a lognormal factor of spread JITTER: a noisy kernel of known median cost."""

import random
import time

import torch

SECONDS_A_CALL = {seconds!r}{comment}
JITTER = {jitter!r}


def attention(q, k, v, *, causal: bool, scale: float) -> torch.Tensor:
    started = time.perf_counter()
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~keep, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
    lasts = SECONDS_A_CALL * random.lognormvariate(0.0, JITTER)
    time.sleep(max(0.0, started + lasts - time.perf_counter()))
    return out
'''
MAIN_SECONDS = 0.008
# Each call's time spread so that one look of cpu-smoke's 20 samples a config cannot tell a
# 25 % slowdown on its own: the run too noisy to see it that issue 49 saw (0.609x [0.32,
# 1.04]), made without relying on the machine's noise.
JITTER = 0.7


def pull_request(tmp_path: Path, seconds: float, comment: str = "", jitter: float = JITTER) -> Path:
    """The example repository with `main` at MAIN_SECONDS a call and a checked-out branch
    `pr` whose kernel takes `seconds` (and carries `comment`), both spread by `jitter`."""
    repo = tmp_path / "my-attention"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    ops = repo / "simple_attention" / "ops.py"
    ops.write_text(OPS.format(seconds=MAIN_SECONDS, comment="", jitter=jitter))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "main")
    git(repo, "checkout", "-qb", "pr")
    ops.write_text(OPS.format(seconds=seconds, comment=comment, jitter=jitter))
    git(repo, "commit", "-qam", "the pull request")
    return repo


def recipe(tmp_path: Path, capsys, monkeypatch, repo: Path) -> tuple[int, GateReport, str]:
    """docs/ci's launch, on the local backend and the cpu-smoke plan: (exit code, gate.json,
    gate.md); the fetched run lies in tmp_path/results/<run id>."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tests/e2e/test_gate.py says why
    dest = tmp_path / "results"
    args = ["launch", "--backend", "local", "--budget", "1", "--plan", "cpu-smoke"]
    args += ["--kernel", str(repo), "--baseline", "main", "--wait", "--fail-on", "slower"]
    code = main([*args, "--dest", str(dest)])
    out, err = capsys.readouterr()
    launched = next(line for line in out.splitlines() if "launched run" in line)
    run_dir = dest / launched.split("launched run ")[1].split()[0]
    assert (run_dir / "gate.json").is_file(), (code, out[-3000:], err[-3000:])
    report = GateReport.model_validate_json((run_dir / "gate.json").read_text())
    return code, report, (run_dir / "gate.md").read_text()


def test_a_pull_request_25_percent_slower_never_passes(bench_env, tmp_path, capsys, monkeypatch):
    repo = pull_request(tmp_path, seconds=1.25 * MAIN_SECONDS)
    code, report, markdown = recipe(tmp_path, capsys, monkeypatch, repo)

    assert code in (6, 7), markdown
    assert report.margin == 0.02 and report.failures == []
    sampling = report.sampling
    assert sampling is not None and sampling.schedule == [20, 40, 80]
    assert report.confidence == sampling.confidence > 0.95  # several looks: each spends less
    if code == 6:
        assert markdown.startswith("### bench gate: REGRESSION (exit 6)")
        assert report.overall.verdict == "slower"
        assert sampling.stopped == "decided"
    else:
        assert markdown.startswith("### bench gate: inconclusive (exit 7)")
        assert report.to_decide and "- to decide: " in markdown
        assert "a GPU: this run timed on the CPU" in markdown


def test_identical_trees_are_never_a_regression(bench_env, tmp_path, capsys, monkeypatch):
    repo = pull_request(tmp_path, seconds=MAIN_SECONDS, comment="  # a comment, no more")
    code, report, markdown = recipe(tmp_path, capsys, monkeypatch, repo)

    assert code in (0, 7), markdown
    assert report.failures == [] and report.gate_on == "geomean"
    assert report.overall is None or report.overall.verdict != "slower"
    # Not asserted: that no single config reads slower. The gate judges the geometric mean
    # (the default, one statistic); each config's own interval misses at 2.5 % two-sided,
    # so of 6 configs one reads slower in up to 7.5 % of identical runs by design (4 of 36
    # loaded runs on 2 cores did, 2026-11-29; every one of the 36 exited 7).
    if code == 0:
        assert report.overall.verdict in ("faster", "equivalent", "not-slower")
        assert report.control.verdict == "equivalent"
    else:
        assert report.to_decide and markdown.startswith("### bench gate: inconclusive (exit 7)")
    assert_later_looks_sample_on(tmp_path / "results" / report.run_id, report.sampling)


def assert_later_looks_sample_on(run_dir: Path, sampling) -> None:
    """Every identity of every config has the samples of the look sampling stopped at: its
    rounds numbered on, as many more placements as samples (fresh ones, numbered on), one
    timing mode a config whatever the look."""
    rows = read_rows(run_dir / "results" / "measurements.csv", Measurement)
    placements = 4 * sampling.samples_per_config // sampling.schedule[0]  # cpu-smoke: 4
    by_key = defaultdict(list)
    for row in rows:
        by_key[(row.config, row.implementation)].append(row)
    assert by_key
    for samples in by_key.values():
        assert sorted(r.round for r in samples) == list(range(sampling.samples_per_config))
        assert {r.placement for r in samples} == set(range(placements))
        assert len({(r.mode, r.calls) for r in samples}) == 1


def test_a_kernel_that_raises_on_causal_says_why_where_the_user_reads(
    bench_env, tmp_path, capsys, monkeypatch
):
    """Issue 49: such a kernel left "-" in the summary, no row in `bench report` and its
    reason only in the logs. Now gate.md, the summary and the report each name every
    failed config with its reason."""
    repo = pull_request(tmp_path, MAIN_SECONDS, comment="  # causal: soon", jitter=0.0)
    ops = repo / "simple_attention" / "ops.py"
    raises = "    if causal:\n        raise NotImplementedError('causal is not done yet')\n"
    ops.write_text(ops.read_text().replace("    if causal:\n", raises))
    git(repo, "commit", "-qam", "causal: not yet")
    code, report, markdown = recipe(tmp_path, capsys, monkeypatch, repo)

    causal = ["fp32-b1h2s17d64-causal", "fp32-b1h4s128d64-causal", "bf16-b2h4s256d64-causal"]
    said = "NotImplementedError: causal is not done yet"
    assert code == 8, markdown
    assert markdown.startswith("### bench gate: candidate INCORRECT (exit 8)")
    failed = {f.config: f for f in report.failures}
    assert set(causal) <= set(failed)
    assert all(failed[c].stage == "gate" and failed[c].reason == said for c in causal)
    for config in causal:
        assert f"  - `{config}` (gate): `{said}`" in markdown
    dest = tmp_path / "results"
    for command in (["fetch", report.run_id], ["report", report.run_id]):
        assert main([*command, "--dest", str(dest)]) == 0
        shown = " ".join(capsys.readouterr().out.split())  # lines wrap at 80 columns
        for config in causal:
            assert f"{config} torch-attention: FAILED gate: {said}" in shown, command
