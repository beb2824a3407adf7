"""Every table `bench report` and `bench prices` print is readable at 80 columns and in a
pipe (no terminal, no COLUMNS: rich's 80): nothing cut with an ellipsis, no line past the
width, names and numbers whole, every verdict word in the legend; the speedup says what it
is and the ratio of medians shows where it differs (issue 31)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.report import ABResults, ABRow, Report, ReportRow, load_run
from results_schema import Comparison, IntervalMethod, OverallSpeedup, ProfileRow
from results_schema.names import new_run_id
from tests.limits import HANG_SECONDS

REPO = Path(__file__).resolve().parents[2]
WIDTH = 80
# The names of the default plan's longest config and the backends a GPU run names.
LONG_CONFIG = "bf16-b2h32kv8s4096d128-causal"
VERDICT_WORDS = ("faster", "slower", "equivalent", "indistinguishable")
FLAG_WORDS = ("impossible", "wrong-timed-output", "quantised", "bimodal")


def rendered(renderable, width: int = WIDTH) -> str:
    out = Console(width=width, file=io.StringIO(), highlight=False, emoji=False)
    out.print(renderable)
    return out.file.getvalue()


def piped(code: str, *args: str) -> str:
    """stdout of a Python process writing to a pipe, with no COLUMNS or LINES set."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def long_speedups(out: str) -> list[str]:
    """Speedups ('1.234x', '0.9341x') printed to more than three significant digits."""
    numbers = re.findall(r"(?<![\w.])(\d+\.\d+)x", out)
    return [n for n in numbers if len(n.replace(".", "").lstrip("0")) > 3]


def assert_fits(out: str, width: int = WIDTH) -> None:
    """Nothing cut, and no line past the width but one word alone (a source, a run folder,
    a plot's path, kept whole for copy and paste: cli/wrap.py)."""
    assert "…" not in out
    whole = ("plot: ", "  source (")  # piped, a line stays whole: these hold a path or URL
    wide = [line for line in out.splitlines() if len(line.rstrip()) > width]
    assert [line for line in wide if " " in line.strip() and not line.startswith(whole)] == []


# --- the main table ------------------------------------------------------------------------


def gpu_report() -> Report:
    """A report as an H100 run of the default plan gives it: long backends, every verdict
    and flag once, a speedup whose ratio of medians differs."""
    rows = [ReportRow(LONG_CONFIG, "flash", "flash:fwd_hdim128_bf16_causal_sm90:sm_90",
                      "graph", 0.2469, 612.4, 61.9, None, None, None)]  # fmt: skip
    words = [*VERDICT_WORDS, *FLAG_WORDS]
    for index, word in enumerate(words):
        verdict = word if word in VERDICT_WORDS else None
        flag = None if verdict else word
        speedup = (1.012, (1.004, 1.031)) if verdict else (None, None)
        rows.append(
            ReportRow(
                LONG_CONFIG,
                ["sdpa", "sdpa-flash", "sdpa@aa", "reference"][index % 4] + f"-{index}",
                "sdpa:cudnn",
                "graph",
                0.3101,
                487.6,
                49.3,
                speedup[0],
                speedup[1],
                verdict,
                versus="flash",
                flag=flag,
                ratio_of_medians=1.256 if index == 0 else (1.0118 if verdict else None),
            )
        )
    statistics = IntervalMethod(
        method="placement-cluster-bootstrap",
        description="made up",
        confidence=0.95,
        resamples=1000,
        placements=4,
        margin=0.01,
    )
    report = Report("20261122-081500-a1b2c3", "complete", rows, statistics=statistics)
    report.candidate = "flash"
    return report


def show_report(report: Report, width: int = WIDTH) -> str:
    from orchestrator.cli.report import show_report as show

    out = Console(width=width, file=io.StringIO(), highlight=False, emoji=False, soft_wrap=True)
    show(out, report)
    return out.file.getvalue()


def test_the_main_table_keeps_its_headers_words_and_names_whole():
    out = show_report(gpu_report())
    assert_fits(out)
    header = next(line for line in out.splitlines() if "speedup" in line)
    assert header.split()[-4:] == ["speedup", "95%", "CI", "verdict"]
    assert LONG_CONFIG in {line.strip() for line in out.splitlines()}
    for row in gpu_report().rows:
        # a name wraps at its spaces, never inside a word, onto two lines at most
        assert row.implementation in out.split()


def test_the_longest_verdicts_are_not_cut_at_80_columns():
    """Rows whose verdicts are the longest the table prints ("cand. not slower", "cand.
    undecided"): once the figure columns left the names too little room, rich cut the
    verdict ("cand. not slow…", a full run's report at 80 columns); the verdict now wraps
    at its spaces instead."""
    import dataclasses

    report = gpu_report()
    longest = iter(("not-slower", "undecided"))
    report.rows = [  # with the widest figures a slow CPU row has
        dataclasses.replace(
            row,
            verdict=next(longest),
            speedup=0.03172,
            speedup_ci=(0.002913, 0.01352),
            median_ms=13170.5,
            tflops=0.0123,
        )
        if row.verdict in ("faster", "slower")
        else row
        for row in report.rows
    ]
    out = show_report(report)
    assert_fits(out)
    words = out.split()
    assert "slower" in words and "undecided" in words and "0.0317x" in words


def test_every_word_in_the_verdict_column_is_in_the_legend():
    from orchestrator.cli.report_table import SHORT_VERDICTS

    out = show_report(gpu_report())
    table, _, legend = out.partition("\nspeedup: ")
    rows = [line.rstrip() for line in table.splitlines() if line.startswith("   ")]
    legend = " ".join(legend.split())
    for word in (*VERDICT_WORDS, *FLAG_WORDS):
        shown = SHORT_VERDICTS.get(word, word)
        assert any(row.endswith(f" {shown}") for row in rows), shown
        assert f"{shown} = {word}:" in legend if shown != word else f"{word}:" in legend
    assert "cand.: the candidate" in legend


def test_the_speedup_is_named_the_median_of_paired_per_round_ratios():
    out = show_report(gpu_report())
    assert "median of the paired per-round ratios" in " ".join(out.split())


def test_the_ratio_of_medians_shows_under_a_speedup_it_differs_from():
    out = show_report(gpu_report())
    lines = out.splitlines()
    ratios = [i for i, line in enumerate(lines) if line.strip().startswith("ratio of medians")]
    assert len(ratios) == 1  # 1.256 differs from 1.012; 1.0118 reads as 1.01, as it does
    line = lines[ratios[0]]
    assert line.split()[-1] == "1.26x"
    assert "sdpa-0" in lines[ratios[0] - 1] and "1.01x" in lines[ratios[0] - 1]
    # under the speedup column
    assert line.index("1.26x") == lines[ratios[0] - 1].index("1.01x")


# --- the A/B table ---------------------------------------------------------------------------


def ab_results() -> ABResults:
    rows = [
        ABRow(LONG_CONFIG, 0.24691234, 0.3101234, 1.2561234, (1.2401234, 1.2731234), "faster"),
        ABRow("fp16-b1h16s8192d128-causal", 1.5, 1.4, 0.9341, (0.90, 1.02), "indistinguishable"),
        ABRow("fp16-b4h16s1024d64", 0.5, 0.5, 1.0001, (0.995, 1.004), "equivalent"),
    ]
    overall = OverallSpeedup(
        identity="flash@baseline",
        versus="flash",
        configs=3,
        geomean=1.0512345,
        ci_low=1.0012345,
        ci_high=1.1012345,
        verdict="indistinguishable",
        method="made up",
    )
    comparison = Comparison(baseline="flash@baseline", source="tree", ref="../old/kernels")
    return ABResults("flash", comparison, rows, overall, None, None)


def show_ab(width: int = WIDTH) -> str:
    from orchestrator.cli.report_sections import show_comparison

    out = Console(width=width, file=io.StringIO(), highlight=False, emoji=False, soft_wrap=True)
    show_comparison(out, ab_results(), 0.01)
    return out.file.getvalue()


def test_the_ab_table_keeps_config_names_and_prints_three_digit_speedups():
    out = show_ab()
    assert_fits(out)
    lines = {line.split()[0] for line in out.splitlines() if line.strip()}
    for row in ab_results().rows:
        assert row.config in lines, row.config  # whole, "causal" included
    assert long_speedups(out) == []
    assert "1.26x" in out and "1.24–1.27" in out
    assert "1.05x [1.00, 1.10]" in " ".join(out.split())  # the overall, to 3 digits too


def test_the_ab_table_shows_the_ratio_of_medians_where_it_differs():
    out = show_ab()
    lines = out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith("ratio of medians")]
    assert lines[at - 1].split()[0] == "fp16-b1h16s8192d128-causal"  # 0.934x, medians 0.933x
    assert lines[at].split()[-1] == f"{1.4 / 1.5:.3f}x"
    assert "median of the paired per-round ratios" in " ".join(out.split())
    legend = " ".join(out.split())
    for word in ("faster", "indistinguishable", "equivalent"):
        assert f"{word}:" in legend


# --- the Nsight Compute table ----------------------------------------------------------------


def profile_rows() -> list[ProfileRow]:
    rows = []
    for index, implementation in enumerate(["flash", "flash@baseline", "sdpa", "sdpa-flash"]):
        rows.append(
            ProfileRow(
                run_id="20261122-081500-a1b2c3",
                config=LONG_CONFIG,
                implementation=implementation,
                state="profiled",
                report=f"results/profile-{index:03d}.ncu-rep",
                kernels=2,
                kernel="flash_fwd_kernel",
                duration_us=12345.6,
                sm_throughput_pct=81.23,
                tensor_pipe_pct=60.1,
                dram_throughput_pct=12.0,
                achieved_occupancy_pct=48.3,
                registers_per_thread=255,
                shared_mem_per_block_bytes=98304,
                local_memory_bytes=123456.0,
                top_stalls="long_scoreboard:1.21;math_pipe_throttle:0.33",
                tensor_flops=1.1e12,
                formula_flops=1.0e12,
                dram_bytes=270.5e6,
                formula_dram_bytes=268.4e6,
                sm_clock_mhz=1755.0,
            )
        )
    rows.append(
        ProfileRow(
            run_id="20261122-081500-a1b2c3",
            config="fp16-b1h16s8192d128-causal",
            implementation="sdpa",
            state="timeout",
            message="ncu did not finish within 120 s",
        )
    )
    return rows


PROFILE_CODE = (
    "import sys; from orchestrator.cli.options import console; "
    "from orchestrator.cli.report_sections import show_profile; "
    "from results_schema import ProfileRow; "
    "show_profile(console(), [ProfileRow.model_validate_json(line) for line in sys.argv[1:]])"
)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["80 columns", "pipe"])
def test_the_nsight_compute_table_is_readable(where):
    from orchestrator.cli.report_sections import show_profile

    rows = profile_rows()
    if where == "pipe":
        out = piped(PROFILE_CODE, *(row.model_dump_json() for row in rows))
    else:
        console = Console(width=WIDTH, file=io.StringIO(), highlight=False, soft_wrap=True)
        show_profile(console, rows)
        out = console.file.getvalue()
    assert_fits(out)
    words = out.split()
    header = next(line for line in out.splitlines() if "µs" in line).split()
    assert header == ["implementation", "µs", "SM", "tensor", "DRAM", "occup.", "regs",
                      "smem", "local"]  # fmt: skip
    lines = [line.split() for line in out.splitlines()]
    assert [LONG_CONFIG] in lines and ["fp16-b1h16s8192d128-causal"] in lines
    flash = next(line for line in lines if line[:1] == ["flash"])
    assert flash == ["flash", "12345.6", "81.2", "60.1", "12.0", "48.3", "255", "96.0", "123456"]
    for row in rows[:4]:
        assert row.implementation in words and row.report in words
    assert "long_scoreboard:1.21," in words and "math_pipe_throttle:0.33;" in words
    # measured work beside the formulas' (issue 53)
    joined = " ".join(words)
    assert "tensor 1.1 TFLOP (formula 1) DRAM 270 MB (least 268) SM 1755 MHz" in joined.replace(
        ",", ""
    )
    assert "ncu did not finish within 120 s" in " ".join(words)
    for name in ("occup.:", "smem:", "local:", "tensor,"):  # every short header explained
        assert name in words


# --- bench prices ----------------------------------------------------------------------------


def catalog_names() -> list[str]:
    from orchestrator.backends.gce.pricing import load_catalog
    from orchestrator.gpus import load_gpu_catalog

    names = []
    for prices in load_catalog()["regions"].values():
        names += [*prices.get("machines", {}), *prices.get("gpus", {}), *prices.get("zones", [])]
    for gpu in load_gpu_catalog().values():
        names += [gpu.machine_type, gpu.accelerator_type, *gpu.zones]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("where", ["80 columns", "pipe"])
def test_prices_keep_machine_names_and_zones_whole(bench_env, capsys, monkeypatch, where):
    from orchestrator.cli import main

    if where == "pipe":
        out = piped("from orchestrator.cli import main; main()", "prices")
    else:
        monkeypatch.setenv("COLUMNS", str(WIDTH))
        assert main(["prices"]) == 0
        out = capsys.readouterr().out
    assert_fits(out)
    words = {word.strip(",") for word in out.split()}
    for name in catalog_names():
        assert name in words, name
    assert "pd-balanced (per GB-month)" in out
    lines = out.splitlines()
    phases = [line.split()[0] for line in lines if re.match(r"^\w+ +\d+ s ", line)]
    assert {"boot", "environment", "payload", "build"} <= set(phases)
    (cost,) = [line for line in lines if line.split()[:1] == ["cost"]]
    cited = cost.split()[-1]
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith(f"{cited} ")]
    note = " ".join(" ".join(lines[at : at + 2]).split())  # wrapped onto a second line
    assert "1-minute minimum" in note and "bench's bundled price catalog" in note


# --- the real report of a CPU A/B run ----------------------------------------------------------


@pytest.fixture(scope="module")
def ab_run_dir(made_once, tmp_path_factory) -> Path:
    """A cpu-smoke A/B run (sdpa against sdpa-math) as fetch publishes it: run once for the
    session (tests/conftest.py), copied here since the report writes its figures into it."""

    def make(folder: Path) -> str:
        plan = json.loads((REPO / "benches" / "plans" / "cpu-smoke.json").read_text())
        comparison = {"baseline": "sdpa-math", "source": "implementation"}
        plan.update(name="cpu-ab", comparison=comparison)
        plan_file = folder / "cpu-ab.json"
        plan_file.write_text(json.dumps(plan))
        run_id = new_run_id()
        out = folder / run_id
        subprocess.run(
            [sys.executable, "-m", "benches", "run", "--plan", str(plan_file), "--out", str(out)]
            + ["--run-id", run_id, "--measurements", "30"],
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=HANG_SECONDS,
        )
        return str(out)

    made = Path(made_once("cpu-ab-run", make))
    out = tmp_path_factory.mktemp("results") / made.name
    shutil.copytree(made, out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("where", ["80 columns", "pipe"])
def test_a_real_ab_report_is_readable(ab_run_dir, where):
    from click.testing import CliRunner

    from orchestrator.cli import cli

    args = ["report", ab_run_dir.name, "--dest", str(ab_run_dir.parent)]
    if where == "pipe":
        out = piped("from orchestrator.cli import main; main()", *args)
    else:
        result = CliRunner().invoke(cli, args, env={"COLUMNS": str(WIDTH)})
        assert result.exit_code == 0, result.output
        out = result.output
    assert_fits(out)
    run = load_run(ab_run_dir)
    ab_part = out[: out.index("overall:")]
    first_words = [line.split()[0] for line in ab_part.splitlines() if line.strip()]
    for config in run.plan.configs:
        assert config.name in first_words  # its A/B row, the name whole
        assert config.name in {line.strip() for line in out.splitlines()}  # its heading
    assert long_speedups(out) == []
    # Each verdict word the tables show is explained below them.
    legend = " ".join(out.split())
    from orchestrator.cli.report_table import SHORT_VERDICTS
    from orchestrator.report.labels import verdict_phrase

    for s in run.summary:
        for word in (s.verdict, s.flag):
            if word:  # as the legend words it ("cand. not slower: ...", a run's data decides)
                assert f"{verdict_phrase(word)}:" in legend, word
                short = SHORT_VERDICTS.get(word)
                assert short is None or f"{short} = {word}" in legend


def test_a_verdict_in_a_row_named_for_another_implementation_says_whose_it_is():
    """Issue 52: 'reference ... 3.20x faster' read as the reference being faster. Every
    speedup is the candidate's over the row: its verdict says so; the A/A control's row
    speaks of its twin."""
    out = show_report(gpu_report())
    table, _, legend = out.partition("\nspeedup: ")
    rows = [line.rstrip() for line in table.splitlines() if line.startswith("   ")]
    for word, phrase in (("faster", "cand. faster"), ("slower", "cand. slower")):
        (row,) = [row for row in rows if row.endswith(f" {word}")]
        assert row.endswith(f" {phrase}") and "@aa" not in row
    assert "cand. faster" in " ".join(legend.split())


def test_a_figure_past_ninety_percent_of_peak_is_marked_to_check_twice():
    """Issue 53: a result above 90 % of the GPU's dense peak is flagged in the report (its
    % of peak marked, the legend saying what to check), and only such a result."""
    report = gpu_report()
    assert "check it twice" not in show_report(report)  # 61.9 % and 49.3 %: no mark
    first = report.rows[0]
    report.rows[0] = ReportRow(
        first.config, first.implementation, first.backend, first.mode,
        0.1651, 915.8, 92.6, None, None, None,
    )  # fmt: skip
    out = show_report(report)
    assert_fits(out)
    assert "92.6!" in out.split()
    assert "check it twice" in out and "90 %" in out
