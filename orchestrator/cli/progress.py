"""The progress display of `launch --wait`: a bar fed by status.json."""

from __future__ import annotations

from orchestrator.errors import ResultsError


def follow(ctx, record, out) -> int:
    """Show progress until the run ends; exit code 0 only for a complete run."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.service.wait import wait_for_run

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as bar:
        task = bar.add_task("starting", total=None, count="")

        def show(view):
            status = view.status
            if status is not None:
                total = status.total or None
                count = f"{status.done}/{status.total}" if total else ""
                label = f"{status.phase:<11} {status.message[:40]:<40}"
                bar.update(task, description=label, completed=status.done, total=total, count=count)

        final = wait_for_run(ctx, record, show)
    manifest = final.manifest
    colour = {"complete": "green", "partial": "yellow"}.get(manifest.status, "red")
    reason = f": {manifest.reason}" if manifest.reason else ""
    out.print(f"bench: run {record.run_id} [bold {colour}]{manifest.status}[/]{reason}")
    out.print(f"fetch the results with: bench fetch {record.run_id}")
    if manifest.status != "complete":
        raise ResultsError(f"run {record.run_id} ended {manifest.status}{reason}")
    return 0
