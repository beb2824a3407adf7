"""Run data never steers the laptop (issue 28, item 3), one test per finding.

Every number a run hands back is bounded by what the run could have done, history is keyed
by the plan's content, `report` is bounded and reads one published copy, and every crash a
run's data could cause is a clear exit code. Runs are built as a hostile VM would leave
them (tests/e2e/test_untrusted_runs.py) and driven through the real CLI, store and registry.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import struct
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.spec import new_run_id
from results_schema import Plan
from results_schema.record import billed_usd
from tests.e2e.test_untrusted_runs import (  # noqa: F401 - bench is a fixture
    _rewrite_csv,
    _set_cell,
    bench,
    build_run,
    publish,
    run_cli,
)

pytestmark = pytest.mark.timeout(300)

CSV_PATHS = (
    "results/measurements.csv",
    "results/summary.csv",
    "results/correctness.csv",
    "results/timed_checks.csv",
)
# What a report image may measure at most: report.MAX_FIGURE_INCHES at report.PLOT_DPI.
MAX_PNG_PIXELS = (2200, 3300)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _record_fields(ctx: Context, run_id: str, **fields) -> None:
    """Set the registry fields this RunRecord has (a registry from before some of them
    lacks them: the test then shows how that code behaves)."""
    known = {f.name for f in dataclasses.fields(RunRecord)}
    changes = {key: value for key, value in fields.items() if key in known}
    if changes:
        ctx.registry.update(run_id, **changes)


def _launched(ctx: Context, run, created: datetime | None = None) -> None:
    """The run as launch leaves it: its payload (holding its plan) in the store, that
    payload's sha256 and its GPU's key in its registry row."""
    from orchestrator.payload import build_payload
    from orchestrator.service.launch import target_gpu

    publish(ctx, run, created or _now() - timedelta(minutes=5))
    payload = build_payload(Plan.model_validate(run.plan))
    ctx.store(run.backend).put_bytes(f"runs/{run.run_id}/payload.tar.gz", payload.data)
    gpu = target_gpu(ctx, run.backend)
    _record_fields(ctx, run.run_id, payload_sha256=payload.sha256, gpu=gpu)


def _hostile(bench_env: Path, backend: str = "local"):
    ctx = Context(load_config())
    outside = bench_env / "outside"
    outside.mkdir(exist_ok=True)
    return ctx, build_run(new_run_id(), backend, outside), bench_env / "results"


def _fetched(bench_env: Path, capsys, edit=None):
    """A run fetched into bench_env/results after `edit(run)`, launched as bench would."""
    ctx, run, dest = _hostile(bench_env)
    if edit is not None:
        edit(run)
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 0, out
    return ctx, run, dest


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    return struct.unpack(">II", path.read_bytes()[16:24])


def _widen_to(run, count: int) -> None:
    """The run's plan and rows copied to `count` configs (renamed copies of its first)."""
    first = run.plan["configs"][0]
    names = [f"{first['name']}-{index:03d}" for index in range(count)]
    run.plan["configs"] = [{**first, "name": name} for name in names]

    def copies(rows):
        column = rows[0].index("config")
        mine = [row for row in rows[1:] if row[column] == first["name"]]
        rows[1:] = [[*row[:column], name, *row[column + 1 :]] for name in names for row in mine]

    for path in CSV_PATHS:
        _rewrite_csv(run, path, copies)


# --- numbers bounded by what the run could have done --------------------------------------


def test_phase_seconds_longer_than_the_run_are_refused(bench_env, capsys):
    """1e308 s in one manifest made every later launch of that plan fail."""
    ctx, run, dest = _hostile(bench_env)
    run.manifest["phases"] = [{"name": "benchmark", "seconds": 1e308, "exit_code": 0}]
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "longer than the run" in out, out
    assert ctx.registry.get(run.run_id).phase_seconds == {}
    assert not (dest / run.run_id).exists()


def test_a_run_longer_than_its_time_cap_is_refused(bench_env, capsys):
    ctx, run, dest = _hostile(bench_env)
    run.manifest["started_at"] = (_now() - timedelta(hours=3)).isoformat()
    _launched(ctx, run, created=_now() - timedelta(hours=3, minutes=5))  # cap: 3600 s
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "longer than its time cap" in out, out


def test_runtime_history_is_keyed_by_the_plans_content_not_its_name(bench_env, capsys):
    """A plan file named like a past one with far more samples once borrowed its minute."""
    from orchestrator.runtime_model import model_phases
    from orchestrator.service.launch import runtime_estimate

    ctx, run, _ = _fetched(bench_env, capsys)
    honest = Plan.model_validate(run.plan)
    renamed = honest.model_copy(update={"samples_per_config": 10**9})
    assert renamed.name == honest.name

    history = runtime_estimate(ctx, "local", honest)
    assert "past run" in next(p.source for p in history.phases if p.phase == "benchmark")
    estimate = runtime_estimate(ctx, "local", renamed)
    modelled = model_phases(renamed, "local").seconds_of("benchmark")
    assert estimate.seconds_of("benchmark") == modelled


@pytest.mark.parametrize("bench", ["gce"], indirect=True)
def test_the_cost_is_the_controllers_reckoning_not_the_vms(bench, bench_env, capsys):  # noqa: F811
    """A gce run that lasted 3 hours and reported $0 made the monthly cap count nothing."""
    ctx, run, dest = _hostile(bench_env, "gce")  # at $0.5 an hour
    run.manifest["started_at"] = (_now() - timedelta(hours=3)).isoformat()
    run.manifest["cost"]["estimated_usd"] = 0.0
    publish(ctx, run, _now() - timedelta(hours=3, minutes=5))
    ctx.registry.update(run.run_id, max_run_seconds=4 * 3600)

    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 0, out
    three_hours = billed_usd(0.5, 3 * 3600)
    assert ctx.registry.get(run.run_id).cost_usd >= three_hours
    assert ctx.registry.committed_this_month() >= three_hours
    fetched = json.loads((dest / run.run_id / "manifest.json").read_text())
    assert fetched["cost"]["estimated_usd"] >= three_hours


def test_rows_naming_configs_the_plan_lacks_are_refused(bench_env, capsys):
    """1,200 distinct configs in summary.csv (inside the row limits) once made `report`
    draw for 695 s; a run reports at most the configs its plan asked for."""
    ctx, run, dest = _hostile(bench_env)

    def extra_configs(rows):
        column = rows[0].index("config")
        first = rows[1]
        rows.extend([*first[:column], f"extra-{i}", *first[column + 1 :]] for i in range(1200))

    _rewrite_csv(run, "results/summary.csv", extra_configs)
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "which the plan lacks" in out, out
    assert not (dest / run.run_id).exists()


def test_a_manifest_naming_another_plan_than_launched_is_refused(bench_env, capsys):
    ctx, run, dest = _hostile(bench_env)
    _launched(ctx, run)
    run.manifest["plan"]["samples_per_config"] += 1
    manifest = json.dumps(run.manifest).encode()
    ctx.store("local").put_bytes(f"runs/{run.run_id}/manifest.json", manifest)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "other than the one launched" in out, out


def test_a_payload_rewritten_in_the_store_is_refused(bench_env, capsys):
    ctx, run, dest = _hostile(bench_env)
    _launched(ctx, run)
    ctx.store("local").put_bytes(f"runs/{run.run_id}/payload.tar.gz", b"not what launch built")
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "payload.tar.gz is not the one launch built" in out, out


# --- crashes that become exit codes ------------------------------------------------------


def test_a_speedup_without_its_interval_is_refused_before_publishing(bench_env, capsys):
    """It once crashed `fetch` (exit 1) after the run was published."""
    ctx, run, dest = _hostile(bench_env)
    _set_cell(run, "results/summary.csv", "speedup_ci_low", "", line=2)
    _set_cell(run, "results/summary.csv", "speedup_ci_high", "", line=2)
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "given together" in out, out
    assert not (dest / run.run_id).exists()


def test_report_draws_a_speedup_above_its_intervals_high_end(bench_env, capsys):
    """ci_high < speedup once crashed `report` (exit 1)."""

    def above(run):
        _set_cell(run, "results/summary.csv", "speedup_ci_high", "1.15", line=2)  # speedup 1.2

    _, run, dest = _fetched(bench_env, capsys, above)
    code, out = run_cli(capsys, "report", run.run_id, "--dest", str(dest))
    assert code == 0, out
    assert (dest / run.run_id / "report" / "speedup.png").is_file()


def test_report_draws_a_config_without_measurements(bench_env, capsys):
    """A summary row whose samples measurements.csv lacks once crashed `report` (exit 1)."""

    def without_first_config(run):
        first = run.plan["configs"][0]["name"]

        def drop(rows):
            column = rows[0].index("config")
            rows[1:] = [row for row in rows[1:] if row[column] != first]

        _rewrite_csv(run, "results/measurements.csv", drop)

    _, run, dest = _fetched(bench_env, capsys, without_first_config)
    code, out = run_cli(capsys, "report", run.run_id, "--dest", str(dest))
    assert code == 0, out
    assert (dest / run.run_id / "report" / "latency.png").is_file()


# --- report bounded, and safe beside fetch ------------------------------------------------


def test_report_of_a_run_with_many_configs_is_bounded_in_size(bench_env, capsys):
    """Plots show a bounded number of configs, in images of bounded size; the table lists
    every row."""
    _, run, dest = _fetched(bench_env, capsys, lambda run: _widen_to(run, 40))
    code, out = run_cli(capsys, "report", run.run_id, "--dest", str(dest))
    assert code == 0, out
    plots = sorted((dest / run.run_id / "report").glob("*.png"))
    assert {p.name for p in plots} == {"latency.png", "speedup.png", "tflops.png"}
    for plot in plots:
        width, height = _png_size(plot)
        assert width <= MAX_PNG_PIXELS[0], (plot.name, width)
        assert height <= MAX_PNG_PIXELS[1], (plot.name, height)
    assert "plots show the first 24 of 40 configs" in out, out
    assert all(config["name"] in out for config in run.plan["configs"])  # the table: all


def test_report_survives_a_fetch_republishing_the_run_meanwhile(bench_env, capsys, monkeypatch):
    """`fetch` running while `report` drew made report fail (exit 1): its report/ folder
    went with the copy fetch replaced."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from orchestrator.service.fetch import fetch

    ctx, run, dest = _fetched(bench_env, capsys)
    original, refetched = Figure.savefig, []

    def refetch_then_save(self, *args, **kwargs):
        if not refetched:  # a fetch publishes a new copy while the first plot is drawn
            refetched.append(fetch(Context(load_config()), ctx.registry.get(run.run_id), dest))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", refetch_then_save)
    code, out = run_cli(capsys, "report", run.run_id, "--dest", str(dest))
    assert refetched and code == 0, out
    assert (dest / run.run_id / "report" / "latency.png").is_file()
    assert sorted(p.name for p in (dest / run.run_id).iterdir()) == [
        "logs",
        "manifest.json",
        "report",
        "results",
    ]


def test_reports_beside_a_fetch_republishing_in_a_loop_all_succeed(bench_env, capsys):
    """The same, with real concurrency: a thread fetches the run again and again (each a
    swap of its folder) while reports run; 4 of 9 once exited 1."""
    from orchestrator.service.fetch import fetch

    ctx, run, dest = _fetched(bench_env, capsys)
    stop, fetches, errors = threading.Event(), [], []

    def refetch():
        while not stop.is_set():
            try:
                fetches.append(fetch(Context(load_config()), ctx.registry.get(run.run_id), dest))
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)
                return

    worker = threading.Thread(target=refetch)
    worker.start()
    try:
        outcomes = [run_cli(capsys, "report", run.run_id, "--dest", str(dest)) for _ in range(3)]
    finally:
        stop.set()
        worker.join()
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    assert fetches and not errors, errors
    assert sorted(p.name for p in dest.iterdir()) == [".gitignore", run.run_id]  # no draft


def test_the_figure_bounds_are_the_pixel_bounds_held_above():
    from orchestrator.report import MAX_FIGURE_INCHES, PLOT_DPI

    assert tuple(round(inches * PLOT_DPI) for inches in MAX_FIGURE_INCHES) == MAX_PNG_PIXELS


def test_a_refetch_keeps_the_report(bench_env, capsys):
    """A re-fetch once deleted an earlier report/; the same results keep their plots."""
    _, run, dest = _fetched(bench_env, capsys)
    assert run_cli(capsys, "report", run.run_id, "--dest", str(dest))[0] == 0
    plot = dest / run.run_id / "report" / "latency.png"
    drawn = plot.read_bytes()
    assert run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))[0] == 0
    assert plot.read_bytes() == drawn


# --- minor findings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell", ['=HYPERLINK("http://evil")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)"]
)
def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_refused(bench_env, capsys, cell):
    ctx, run, dest = _hostile(bench_env)
    _set_cell(run, "results/correctness.csv", "message", cell)
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "as a formula" in out, out
    assert not (dest / run.run_id).exists()


def test_a_plain_negative_number_in_a_csv_cell_is_data(bench_env, capsys):
    def negative(run):
        _set_cell(run, "results/correctness.csv", "message", "-1.5")

    _fetched(bench_env, capsys, negative)


def test_a_nul_byte_in_a_csv_cell_is_refused(bench_env, capsys):
    ctx, run, dest = _hostile(bench_env)
    _set_cell(run, "results/correctness.csv", "message", "a\0b")
    _launched(ctx, run)
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 5 and "NUL" in out, out


def test_report_reads_and_writes_only_published_run_folders(bench_env, capsys):
    """`bench report PATH` once read any folder and wrote report/ into it."""
    _, run, dest = _fetched(bench_env, capsys)
    elsewhere = bench_env / "elsewhere"
    shutil.copytree(dest / run.run_id, elsewhere)
    for path in (str(elsewhere), os.path.relpath(elsewhere, dest)):
        code, out = run_cli(capsys, "report", path, "--dest", str(dest))
        assert code == 2 and "is not a run" in out, out
    assert not (elsewhere / "report").exists()
    # A copy under another run's id is not that run.
    other = dest / new_run_id()
    shutil.copytree(dest / run.run_id, other)
    code, out = run_cli(capsys, "report", other.name, "--dest", str(dest))
    assert code == 5 and f"not {other.name}" in out, out
    assert not (other / "report").exists()
    # The path of a folder fetch published is a run folder.
    code, out = run_cli(capsys, "report", str(dest / run.run_id))
    assert code == 0, out
    assert (dest / run.run_id / "report" / "latency.png").is_file()


def test_a_killed_fetchs_staging_folder_is_removed_by_the_next_fetch(bench_env, capsys):
    """Of any run: a staging folder only a killed fetch of another run left stayed."""
    ctx, run, dest = _hostile(bench_env)
    _launched(ctx, run)
    killed = dest / f".staging-{new_run_id()}" / "results"
    killed.mkdir(parents=True)
    (killed / "measurements.csv").write_text("half a file")
    busy = dest / f".staging-{new_run_id()}-busy"  # a fetch still running holds its lock
    busy.mkdir()
    held = os.open(busy, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))[0] == 0
    finally:
        os.close(held)
    assert sorted(p.name for p in dest.iterdir()) == sorted([".gitignore", run.run_id, busy.name])
