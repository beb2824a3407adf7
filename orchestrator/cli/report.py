from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import console


@click.command()
@click.argument("run_id")
@click.option("--compare", "compare_id", default=None, help="another fetched run to compare with")
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="where fetched runs live",
)
def report(run_id, compare_id, dest):
    """Tables and PNG plots of a fetched run, optionally against another run.

    Plots (latency distributions, speedup with its 95% interval, TFLOP/s
    against sequence length) are written to DEST/<run id>/report/.

    \b
    Examples:
      bench fetch 20261122-081500-a1b2c3 && bench report 20261122-081500-a1b2c3
      bench report RUN_A --compare RUN_B
    """
    from orchestrator.errors import NotFoundError
    from orchestrator.report import make_report

    run_dir = dest / run_id
    compare_dir = dest / compare_id if compare_id else None
    for directory in filter(None, (run_dir, compare_dir)):
        if not (directory / "manifest.json").is_file():
            raise NotFoundError(
                f"{directory} holds no fetched run; run `bench fetch {directory.name}` first"
            )
    result = make_report(run_dir, compare_dir)
    console().print(result)
    return 0
