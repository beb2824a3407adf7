from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import Money, backend_option, cloud_options, make_context


@click.command()
@cloud_options
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
@click.option(
    "--instance",
    "which",
    flag_value="instance",
    help="gce: print the instance request (JSON) instead",
)
@click.option(
    "--kernel",
    metavar="DIR",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="the kernel repository DIR declares (bench-kernel.toml); default: the current "
    "directory when it holds one",
)
@click.option(
    "--peers",
    metavar="NAMES",
    default=None,
    help="public libraries the run would also time, comma-separated (see launch --peers)",
)
def render(backend, plan_ref, budget, which, kernel, peers):
    """Print the startup script a launch would run; creates and sends nothing.

    stdout carries only what you asked for (the startup script, the shutdown
    script, or with --instance the instance request JSON), so it can be piped;
    the runtime estimate, phase by phase with its sources, goes to stderr.

    \b
    Examples:
      bench render --backend local | less
      bench render --backend gce --plan default --instance | jq .scheduling
      bench render --backend gce --kernel ../my-attn | grep build_user_kernel
      bench render --backend gce --plan default --peers xformers,fa4 \\
        | grep install_peer
    """
    from orchestrator.cli.wrap import echo
    from orchestrator.errors import UsageError
    from orchestrator.kernel_tree.user import default_kernel_dir
    from orchestrator.service.render import render_scripts

    ctx = make_context(backend=backend)
    name, _ = ctx.resolved_backend()
    placeholders = _placeholders(ctx.config, name)
    if placeholders:
        # It creates nothing: what is not set yet is shown as a placeholder, and said so.
        ctx = make_context(backend=backend, **placeholders)
        shown = ", ".join(f"{key} = {value!r}" for key, value in placeholders.items())
        echo(
            f"# PLACEHOLDERS: {shown} stand for settings not made yet (bench.toml or "
            "BENCH_*): a launch needs the real ones",
            err=True,
        )
    kernel = kernel if kernel is not None else default_kernel_dir(Path.cwd())
    names = tuple(dict.fromkeys(n.strip() for n in (peers or "").split(",") if n.strip()))
    rendered = render_scripts(ctx, name, plan_ref, budget, kernel, names)
    if which == "instance":
        if not rendered.instance_json:
            raise UsageError(f"--instance: the {name} backend sends no instance request")
        click.echo(rendered.instance_json)
    else:
        click.echo(rendered.shutdown if which == "shutdown" else rendered.startup, nl=False)
    if rendered.estimate is not None:
        from rich.console import Console

        from orchestrator.cli.estimate_table import phase_table

        click.echo("# ---- runtime estimate (the launch would budget with it) ----", err=True)
        Console(stderr=True, highlight=False).print(
            phase_table({"seconds": rendered.estimate}, rendered.rate_usd_per_hour)
        )
    if rendered.instance_json and which != "instance":
        click.echo("# the instance request: add --instance to print it", err=True)
    return 0


# Valid names (GCE's and Cloud Storage's rules), plainly not anyone's.
PLACEHOLDERS = {"project": "placeholder-project", "bucket": "placeholder-bucket"}


def _placeholders(config, backend: str) -> dict[str, str]:
    """Placeholder values for what a cloud backend needs and the settings lack."""
    from orchestrator.backends.registry import capabilities

    if not capabilities(backend).billed:
        return {}
    return {key: value for key, value in PLACEHOLDERS.items() if getattr(config, key) is None}
