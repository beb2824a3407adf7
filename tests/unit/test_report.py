"""`make_report` on a real cpu-smoke run's output: table rows, PNGs, run comparison."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.report_table import significant
from orchestrator.errors import ResultsError
from orchestrator.report import Disagreement, implementation_label, load_run, make_report
from results_schema import Plan
from tests.limits import HANG_SECONDS

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(cpu_smoke_run, tmp_path_factory) -> Path:
    """A run's folder as fetch publishes it: named by its run id, in a results directory.
    A copy of the session's cpu-smoke run: the report writes its figures into it."""
    out = tmp_path_factory.mktemp("results") / cpu_smoke_run.name
    shutil.copytree(cpu_smoke_run, out)
    return out


@pytest.mark.slow
def test_report_rows_and_pngs(run_dir):
    report = make_report(run_dir)
    assert report.status == "complete"
    plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    assert len(report.rows) == len(plan.configs) * len(plan.identities)
    baselines = [r for r in report.rows if r.implementation == "sdpa-math"]
    assert all(r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1] for r in baselines)
    assert report.statistics.method == "placement-cluster-bootstrap"
    assert "δ=0.02" in report.statistics.description
    assert report.control == "sdpa@aa"
    # Every config's control row has a verdict, or a flag on it or on its twin saying why it
    # has none (a busy machine's quantised or bimodal timing: benches/timing_shape.py).
    flags = {(r.config, r.implementation): r.flag for r in report.rows}
    control = [r for r in report.rows if r.implementation == "sdpa@aa"]
    assert len(control) == len(plan.configs)
    assert all(
        r.verdict is not None or r.flag or flags[(r.config, r.versus or "sdpa")] for r in control
    )
    assert sum(report.control_verdicts().values()) == sum(r.verdict is not None for r in control)
    assert {p.name for p in report.plots} == {"latency.png", "speedup.png", "tflops.png"}
    for plot in report.plots:
        assert plot.parent == run_dir / "report"
        assert plot.read_bytes()[:8] == PNG_MAGIC


def plot_files(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each file of report/ with its inode, modification time and bytes: a redraw swaps in
    new files (another inode), a kept one is the very same."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted((folder / "report").iterdir())
    }


@pytest.mark.slow
def test_a_second_report_of_the_same_results_keeps_their_plots(run_dir, tmp_path, monkeypatch):
    """Reporting a run again draws nothing (1-5 s of CPU a report): the plots of these
    results by this code are kept, file for file. Other drawing code, or a report/ whose
    stamp or plots are not what a report left there, is drawn again. Two whole draws: the
    first and one redraw (a plot replaced by a link); the other cases ask the rule that
    decides a redraw, each draw being 1-2 s of a 2-core machine's CPU (issue 31)."""
    from orchestrator.report import load, service

    run = tmp_path / run_dir.name
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("report"))
    first = make_report(run)
    drawn = plot_files(run)
    assert set(drawn) == {p.name for p in first.plots} | {"drawn.json"}

    again = make_report(run)
    assert again.plots == first.plots
    assert plot_files(run) == drawn

    def kept(folder: Path) -> bool:
        return service._plots_drawn_already(folder, load.results_of(folder)) is not None

    assert kept(run)
    (run / "report" / "latency.png").unlink()
    (run / "report" / "latency.png").symlink_to(run / "plan.json")
    assert not kept(run)
    assert make_report(run).plots == first.plots
    redrawn = plot_files(run)
    assert not (run / "report" / "latency.png").is_symlink()
    assert {n: f[2] for n, f in redrawn.items()} == {n: f[2] for n, f in drawn.items()}
    assert all(redrawn[n][0] != drawn[n][0] for n in drawn)  # the same figures, new files
    assert kept(run)

    stamp = run / "report" / "drawn.json"
    original = stamp.read_text()
    stamp.write_text(original.replace('"plots": [', '"plots": ["../plan.json", '))
    assert not kept(run)
    stamp.write_text(original)
    assert kept(run)
    monkeypatch.setattr(service, "drawing_identity", lambda: "other code")
    assert not kept(run)
    monkeypatch.undo()
    # A folder without a manifest (not a fetched run's): nothing fixes its result files'
    # bytes, so its plots are drawn every time, even beside a stamp a report left.
    loose = tmp_path / "by-hand"
    shutil.copytree(run, loose, ignore=shutil.ignore_patterns("manifest.json"))
    assert (loose / "report" / "drawn.json").exists() and not kept(loose)


@pytest.mark.parametrize(
    "stamp",
    [
        b"\xff not json",
        b"[]",
        b'{"results": "RESULTS", "drawn_by": "CODE"}',
        b'{"results": "RESULTS", "drawn_by": "CODE", "plots": [{}]}',
        b'{"results": "RESULTS", "drawn_by": "CODE", "plots": ["latency.png", "latency.png"]}',
        b'{"results": "RESULTS", "drawn_by": "CODE", "plots": ["../manifest.json"]}',
        b'{"results": "other results", "drawn_by": "CODE", "plots": ["latency.png"]}',
        b'{"results": "RESULTS", "drawn_by": "other code", "plots": ["latency.png"]}',
        b'{"results": "RESULTS", "drawn_by": "CODE", "plots": ["latency.png"], "pad": "'
        + b"x" * 5000
        + b'"}',
    ],
)
def test_a_stamp_that_is_not_ours_keeps_nothing(stamp):
    """A report/drawn.json a report did not write for these results and this code (not
    JSON, a field missing, a name of no figure of ours, another run's, too long) names no
    plots to keep: they are drawn again."""
    from orchestrator.report import plots, service

    ours = b'{"results": "RESULTS", "drawn_by": "CODE", "plots": ["latency.png"]}'
    code = plots.drawing_identity().encode()
    assert service._stamped_plots(ours.replace(b"CODE", code), "RESULTS") == ["latency.png"]
    assert service._stamped_plots(stamp.replace(b"CODE", code), "RESULTS") is None


def test_a_run_agrees_with_itself(run_dir):
    report = make_report(run_dir, compare_dir=run_dir)
    assert report.compared_with == report.run_id
    assert report.disagreements == []
    assert report.compare_warning is None


def test_compare_warns_when_the_runs_time_different_candidates(run_dir, tmp_path):
    import json

    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["plan"].update(candidate="sdpa-math", compared_with=["sdpa", "reference"])
    (other / "manifest.json").write_text(json.dumps(manifest))
    report = make_report(run_dir, compare_dir=other)
    assert report.compare_warning == (
        f"the runs time different candidates: sdpa here, sdpa-math in {report.compared_with}"
    )


def test_shifted_run_is_flagged(run_dir, tmp_path):
    """A copy whose latencies are all far larger (1000x, or 10x the run's own max/min ratio,
    so that a host stall in a loaded machine's CPU run cannot make two intervals overlap):
    every median interval must disagree."""
    (tmp_path / "results").mkdir()
    for name in ("summary.csv", "correctness.csv"):
        (tmp_path / "results" / name).write_bytes((run_dir / "results" / name).read_bytes())
    lines = (run_dir / "results" / "measurements.csv").read_text().splitlines()
    column = lines[0].split(",").index("latency_ms")
    latencies = [float(line.split(",")[column]) for line in lines[1:]]
    factor = max(1000.0, 10 * max(latencies) / min(latencies))
    scaled = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        cells[column] = repr(float(cells[column]) * factor)
        scaled.append(",".join(cells))
    (tmp_path / "results" / "measurements.csv").write_text("\n".join(scaled) + "\n")
    report = make_report(run_dir, compare_dir=tmp_path)
    medians = {
        (d.config, d.implementation) for d in report.disagreements if d.quantity == "median_ms"
    }
    assert len(medians) == len(report.rows)
    assert all(isinstance(d, Disagreement) for d in report.disagreements)
    # this run's medians are at least 1000x smaller than the other's
    assert all(
        d.relative_difference < -0.99 for d in report.disagreements if d.quantity == "median_ms"
    )


def test_missing_results_is_a_results_error(tmp_path):
    with pytest.raises(ResultsError, match="fetch the run first"):
        make_report(tmp_path)


@pytest.mark.slow
def test_report_does_not_import_torch():
    code = (
        "import sys; from pathlib import Path; import orchestrator.report as r; "
        "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=HANG_SECONDS)


# --- reading the report: 80 columns, pipes, plots ------------------------------------------


def _one_config(run):
    """The run cut to its first config, as a one-config plan would have measured it."""
    first = run.summary[0].config
    plan = run.plan.model_copy(update={"configs": [c for c in run.plan.configs if c.name == first]})
    return dataclasses.replace(
        run,
        plan=plan,
        summary=[s for s in run.summary if s.config == first],
        latencies={k: v for k, v in run.latencies.items() if k[0] == first},
    )


def _assert_readable_at_80(out: str, run_dir: Path) -> None:
    """No line past 80 columns but a plot's path alone (kept whole for copy and paste),
    nothing cut with an ellipsis, every config on a line of its own, every median whole."""
    run = load_run(run_dir)
    lines = out.splitlines()
    long = [line for line in lines if len(line.rstrip()) > 80 and " " in line.strip()]
    assert [line for line in long if not line.startswith("plot: ")] == []  # whole if piped
    assert "…" not in out
    stripped = {line.strip() for line in lines}
    words = set(out.split())
    for s in run.summary:
        assert s.config in stripped
        assert s.implementation in words
        assert significant(s.median_ms, 4) in words
    assert "sdpa (flash)" in out  # the backend that ran, named
    assert f"candidate {run.plan.candidate}" in out


def test_report_is_readable_at_80_columns(run_dir):
    from click.testing import CliRunner

    from orchestrator.cli import cli

    result = CliRunner().invoke(
        cli, ["report", run_dir.name, "--dest", str(run_dir.parent)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    _assert_readable_at_80(result.output, run_dir)


@pytest.mark.slow
def test_report_is_readable_in_a_pipe(run_dir):
    """No terminal and no COLUMNS: rich's default width, 80."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", "report"]
        + [run_dir.name, "--dest", str(run_dir.parent)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    _assert_readable_at_80(result.stdout, run_dir)


@pytest.mark.parametrize(
    ("implementation", "backends", "label"),
    [
        ("sdpa", ["sdpa:cudnn"], "sdpa (cudnn)"),
        ("sdpa", ["sdpa:cudnn", "sdpa:flash", "sdpa:cudnn"], "sdpa (cudnn/flash)"),
        ("sdpa@aa", ["sdpa:flash"], "sdpa@aa (flash)"),
        ("sdpa-math", ["sdpa:math"], "sdpa-math"),  # pinned: the name says it
        ("sdpa-extra16", ["sdpa:efficient"], "sdpa-extra16 (efficient)"),
        ("flash", ["user:flash@0123456789ab+dirty"], "flash (0123456789ab+dirty)"),
        # A run from before our kernel had a contract: its backend as recorded.
        ("flash", ["flash:fwd_hdim64_fp16_causal:sm_89"], "flash (fwd_hdim64_fp16_causal:sm_89)"),
        ("reference", ["reference:float64"], "reference (float64)"),
        ("mine", ["mine"], "mine"),
    ],
)
def test_implementation_label_names_the_backend_that_ran(implementation, backends, label):
    assert implementation_label(implementation, backends) == label


@pytest.mark.slow
@pytest.mark.parametrize("cut", [False, True], ids=["whole run", "one config"])
def test_plots_name_the_candidate_and_fit_their_titles(run_dir, cut):
    from orchestrator.report import plots

    run = load_run(run_dir)
    run = _one_config(run) if cut else run
    plt = plots.load_pyplot()
    for build in (plots.latency_figure, plots.speedup_figure, plots.tflops_figure):
        fig = build(plt, run)
        fig.canvas.draw()
        title = fig._suptitle
        assert "candidate sdpa (flash)" in title.get_text()
        box = title.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, build.__name__
        for ax in fig.axes:  # no empty panel
            assert ax.has_data(), build.__name__
        plt.close(fig)


def test_tflops_plots_throughput_against_sequence_length(run_dir):
    """As `report --help` says: TFLOP/s against sequence length, a panel per (causal, head
    dim), a marker per (config, implementation) at its config's sequence length, and no
    line across configs (they differ in more than sequence length)."""
    from orchestrator.report import plots

    run = load_run(run_dir)
    plt = plots.load_pyplot()
    fig = plots.tflops_figure(plt, run)
    configs = {c.name: c for c in run.plan.configs}
    assert len(fig.axes) == len({(c.causal, c.head_dim) for c in configs.values()})
    unplaced = {(s.config, s.implementation): s.tflops for s in run.summary}
    for ax in fig.axes:
        assert ax.get_xlabel() == "sequence length" and "TFLOP/s" in ax.get_ylabel()
        assert ax.get_xscale() == "log"
        causal = "not causal" not in ax.get_title()
        for line in ax.get_lines():
            assert line.get_linestyle() == "None"  # markers only
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
                # nudged apart by at most 1.25x, so equal values stay visible
                (key,) = [
                    key
                    for key, tflops in unplaced.items()
                    if tflops == y
                    and configs[key[0]].causal == causal
                    and 0.8 < x / configs[key[0]].seq_len < 1.25
                ]
                del unplaced[key]
    assert unplaced == {}  # every (config, implementation) drawn once
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == sorted(titles, key=lambda t: "not causal" not in t)  # causal ones last
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "sdpa (flash)" in legend and len(legend) == len({s.implementation for s in run.summary})
    plt.close(fig)


def test_report_of_a_run_that_failed_before_timing_says_why(run_dir, tmp_path):
    """Not "fetch the run first": the run was fetched; it ended before it measured."""
    import json

    failed = tmp_path / run_dir.name
    shutil.copytree(run_dir, failed)
    manifest = json.loads((failed / "manifest.json").read_text())
    manifest.update(status="failed", reason="interrupted by SIGTERM during phase build")
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith("results/")]
    (failed / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(failed / "results")
    with pytest.raises(ResultsError) as refused:
        load_run(failed)
    message = str(refused.value)
    assert f"run {run_dir.name} failed: interrupted by SIGTERM during phase build" in message
    assert "fetch the run first" not in message


def test_the_speedup_plot_shows_the_a_a_control_as_the_control(run_dir):
    """sdpa@aa's row is sdpa against itself: labelled so, never as the candidate's
    speedup over another implementation."""
    from orchestrator.report import plots

    plt = plots.load_pyplot()
    run = load_run(run_dir)
    figure = plots.speedup_figure(plt, run)
    labels = figure.axes[0].get_legend_handles_labels()[1]
    plt.close(figure)
    control = [label for label in labels if "A/A control" in label]
    assert len(control) == 1 and "against itself" in control[0]
    assert not any(label.startswith("over") and "@aa" in label for label in labels)


@pytest.mark.slow
def test_the_speedup_plots_axis_label_lies_inside_its_figure_and_names_the_candidate(run_dir):
    """Issue 52: the label was one line wider than the figure, cut off at both ends."""
    from orchestrator.report import plots

    plt = plots.load_pyplot()
    figure = plots.speedup_figure(plt, load_run(run_dir))
    figure.canvas.draw()
    label = figure.axes[0].xaxis.label
    box, inside = label.get_window_extent(), figure.bbox
    text = label.get_text()
    plt.close(figure)
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)
    assert text.startswith("speedup of sdpa") and "over each implementation" in text


@pytest.mark.parametrize(
    ("value", "digits", "shown"),
    [
        (0.9996, 3, "1.00"),
        (0.99949, 3, "0.999"),
        (9.996, 3, "10.0"),
        (0.08044, 3, "0.0804"),
        (111.84, 4, "111.8"),
        (13170.2, 4, "13170"),
        (-0.9996, 3, "-1.00"),
    ],
)
def test_significant_digits_are_counted_after_rounding(value, digits, shown):
    """A speedup of 0.9996 printed as 1.000 (four digits: a flake of the 80-column report
    test whenever a ratio fell in [0.9995, 1))."""
    assert significant(value, digits) == shown
