from __future__ import annotations

import click

from orchestrator.cli.options import Money, backend_option, make_context


@click.command()
@backend_option()
@click.option(
    "--plan", "plan_ref", default="auto", show_default=True, help="plan name, .json file or auto"
)
@click.option(
    "--budget", type=Money(), default=1.0, show_default=True, help="budget used for the time cap"
)
@click.option(
    "--shutdown", "which", flag_value="shutdown", help="print the shutdown script instead"
)
def render(backend, plan_ref, budget, which):
    """Print the startup script a launch would run; creates and sends nothing.

    On stderr: the runtime estimate, phase by phase with its sources, and on
    gce the instance request as JSON.

    \b
    Examples:
      bench render --backend local | less
      bench render --backend gce --plan default
    """
    from orchestrator.service.render import render_scripts

    ctx = make_context(backend=backend)
    name, _ = ctx.config.resolved_backend()
    rendered = render_scripts(ctx, name, plan_ref, budget)
    click.echo(rendered.shutdown if which == "shutdown" else rendered.startup, nl=False)
    if rendered.estimate is not None:
        from rich.console import Console

        from orchestrator.cli.estimate_table import phase_table

        click.echo("# ---- runtime estimate (the launch would budget with it) ----", err=True)
        Console(stderr=True, highlight=False).print(
            phase_table({"seconds": rendered.estimate}, rendered.rate_usd_per_hour)
        )
    if rendered.instance_json and which != "shutdown":
        click.echo("\n# ---- instance request (JSON) ----", err=True)
        click.echo(rendered.instance_json, err=True)
    return 0
