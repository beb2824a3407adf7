from __future__ import annotations

import click

from orchestrator.cli.options import make_context


@click.command()
@click.option("--dry-run", is_flag=True, help="list what would be removed; remove nothing")
def clean(dry_run):
    """Free the disk finished local runs hold: their sandboxes and store copies.

    A run that still runs (or is being launched) is never touched. Fetched
    results (results/<run id>/) and the run registry stay: `bench status`
    still lists every run, and `bench report` still reads what you fetched.

    \b
    Examples:
      bench clean --dry-run
      bench clean
    """
    from orchestrator.service.clean import clean as clean_runs

    result = clean_runs(make_context(), dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for removal in result.removed:
        click.echo(f"bench: {verb} {removal.path} ({_size(removal.bytes)})")
    for run_id, why in result.kept.items():
        click.echo(f"bench: kept run {run_id}: {why}")
    click.echo(
        f"bench: {verb} {len(result.removed)} paths; "
        f"{'would free' if dry_run else 'freed'} {_size(result.bytes_freed)}"
    )
    return 0


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} bytes"
