from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import console, dest_option


@click.command()
@click.option("--kernel", default=None, help="the candidate's name, e.g. flash or sdpa")
@click.option("--gpu", default=None, help="part of the GPU's name, e.g. h100 (cpu: no GPU)")
@dest_option("where fetched runs live")
@click.option(
    "--png",
    "png",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="where the plot goes  [default: DEST/history.png]",
)
def history(kernel, gpu, dest, png):
    """One kernel's medians on one GPU type across fetched runs, in commit order.

    For each config, each run's median ms of the candidate with its 95%
    interval and its change from the first run shown of the same plan: a
    slow drift across many small pull requests shows as a column that
    creeps. Runs of different plans never share a table; a run whose A/A
    control found the machine noisy is marked (noisy). Runs are placed
    by the commit their candidate was built from (kept at launch, +dirty
    for uncommitted kernel changes) in `git rev-list --topo-order` of the
    repository holding the current directory; without one, or for a
    commit it lacks, by launch time. The newest 60 runs are shown. A plot
    of the same goes to --png (one panel per config, the first 24).

    Reads the folders `bench fetch` published under DEST, through the same
    checks as `bench report`; a folder that is no valid run is listed as
    skipped with the reason. With runs of several kernels or GPU types,
    --kernel and --gpu choose one (exit 2 lists them). No run to show is
    no error: one line says so, exit 0.

    \b
    Examples:
      bench history
      bench history --kernel flash --gpu l4 --png drift.png
      bench history --dest ci-results --kernel my-attention
    """
    from orchestrator.kernel_tree.git import repository_root
    from orchestrator.service.history import HistoryRequest, NoHistory, make_history

    request = HistoryRequest(dest, kernel, gpu, png, repository_root(Path.cwd()))
    found = make_history(request)
    out = console()
    if isinstance(found, NoHistory):
        show_skipped(out, found.skipped)
        out.print(f"bench history: {_safe(found.message)}")
        return 0
    show_history(out, found)
    return 0


def show_history(out, history) -> None:
    """A table per plan and config, narrow enough for 80 columns, then what was left out."""
    from orchestrator.cli.report_sections import NOISY_REMEDY

    plans = history.plans
    out.print(
        f"{_safe(history.kernel)} on {_safe(history.gpu)}: {counted(len(history.runs), 'run')} "
        f"in {history.order} order, oldest first"
    )
    if len(plans) == 1:
        out.print(f"plan {_safe(plans[0])}")
    else:
        out.print(f"{len(plans)} plans: a table for each plan and config, changes within a plan")
    for plan, config in history.tables:
        out.print(config_table(history, plan, config, several_plans=len(plans) > 1))
    if history.noisy:
        out.print(
            f"noisy: {counted(history.noisy, 'run')} whose A/A control found the machine too "
            f"noisy for its verdicts; its change may be noise, not the kernel's. {NOISY_REMEDY}"
        )
    if history.not_in_history:
        last = counted(history.not_in_history, "run")
        out.print(
            f"the last {last}' commits are not in this repository's history: they follow by "
            "launch time"
            if history.not_in_history > 1
            else "the last run's commit is not in this repository's history: it follows by "
            "launch time"
        )
    if history.omitted:
        out.print(f"{counted(history.omitted, 'older run')} not shown")
    show_skipped(out, history.skipped)
    out.print(f"plot: {_safe(history.png)}")


def counted(count: int, word: str) -> str:
    """'1 run', '3 runs'."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def config_table(history, plan: str, config: str, several_plans: bool = False):
    """One plan's runs of one config; a run marked noisy says so beside its id."""
    from rich import box
    from rich.table import Table

    title = f"plan {_safe(plan)}: {_safe(config)}" if several_plans else _safe(config)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run", no_wrap=True)
    table.add_column("candidate", no_wrap=True)
    table.add_column("median ms", justify="right")
    table.add_column("95% interval", justify="right")
    table.add_column("change", justify="right")
    for run in history.runs_of(plan):
        point = run.points.get(config)
        if point is None:
            table.add_row(run.run_id, _safe(run.source), "-", "-", "-")
            continue
        low_high = f"{point.interval[0]:.4g}-{point.interval[1]:.4g}" if point.interval else "-"
        change = history.change_from_first(config, run)
        marks = ([] if run.status == "complete" else [_safe(run.status)]) + (
            ["noisy"] if run.noisy else []
        )
        # On a line of its own: the run column stays as wide as a run id, within 80.
        status = f"\n({', '.join(marks)})" if marks else ""
        table.add_row(
            run.run_id + status,
            _safe(run.source),
            f"{point.median_ms:.4g}",
            low_high,
            f"{100 * change:+.1f}%" if change is not None else "-",
        )
    return table


def show_skipped(out, skipped) -> None:
    for run in skipped:
        out.print(f"skipped {_safe(run.name, 60)}: {_safe(run.reason, 300)}")


def _safe(value, max_chars: int | None = None) -> str:
    from orchestrator.text import markup_safe

    return markup_safe(value, max_chars)
