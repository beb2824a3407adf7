from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, make_context


@click.command()
@cloud_options
@click.argument("run_id", required=False)
@click.option("--follow", "-f", is_flag=True, help="keep printing until the run ends")
def logs(run_id, follow):
    """Print a run's startup-script log (the VM's serial port on gce).

    \b
    Examples:
      bench logs                        # the latest run
      bench logs 20261122-081500-a1b2c3 --follow
    """
    from orchestrator.service.logs import log_lines

    for line in log_lines(make_context(), run_id, follow):
        click.echo(line)
    return 0
