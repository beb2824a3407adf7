from __future__ import annotations

import click

from orchestrator.cli.options import bench_command, make_context, yes_option
from orchestrator.cli.wrap import echo


@click.command()
@click.option("--dry-run", is_flag=True, help="list what would be removed; remove nothing")
@click.option(
    "--include-unfetched",
    is_flag=True,
    help="also remove runs nobody fetched: their results go with them (listed first, "
    "then a confirmation unless --yes)",
)
@yes_option()
def clean(dry_run, include_unfetched, yes):
    """Free the disk finished local runs hold: their sandboxes and store copies.

    A run that still runs (or is being launched) is never touched, nor is one
    you have not fetched (its store copy is its only copy) unless you pass
    --include-unfetched. Fetched results (results/<run id>/) and the run
    registry stay: `bench status` still lists every run, and `bench report`
    still reads what you fetched.

    \b
    Examples:
      bench clean --dry-run
      bench clean
      bench clean --include-unfetched
    """
    from orchestrator.service.clean import NOT_FETCHED
    from orchestrator.service.clean import clean as clean_runs

    ctx = make_context()
    if include_unfetched and not dry_run and not yes:
        planned = clean_runs(ctx, dry_run=True, include_unfetched=True)
        if planned.unfetched and not _confirmed(planned.unfetched):
            echo("bench: nothing removed")
            return 0
    result = clean_runs(ctx, dry_run=dry_run, include_unfetched=include_unfetched)
    verb = "would remove" if dry_run else "removed"
    for removal in result.removed:
        echo(f"bench: {verb} {removal.path} ({_size(removal.bytes)})")
    unfetched = [run_id for run_id, why in result.kept.items() if why == NOT_FETCHED]
    for run_id, why in result.kept.items():
        if why != NOT_FETCHED:
            echo(f"bench: kept run {run_id}: {why}")
    if unfetched:
        command = bench_command()
        echo(
            f"bench: kept {len(unfetched)} runs not fetched yet ({', '.join(unfetched)}): "
            f"`{command} fetch --all` first, or `{command} clean --include-unfetched` to "
            "delete their results too"
        )
    echo(
        f"bench: {verb} {len(result.removed)} paths; "
        f"{'would free' if dry_run else 'freed'} {_size(result.bytes_freed)}"
    )
    return 0


def _confirmed(unfetched: list[str]) -> bool:
    echo("bench: these runs were never fetched; their results would be deleted with them:")
    for run_id in unfetched:
        echo(f"  {run_id}")
    return click.confirm("Delete them?", default=False)


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} bytes"
