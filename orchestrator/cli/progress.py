"""The progress display of `launch --wait`: a bar fed by status.json."""

from __future__ import annotations

from orchestrator.errors import ResultsError
from orchestrator.text import markup_safe


def follow(ctx, record, out) -> int:
    """Show progress until the run ends; exit code 0 only for a complete run."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.service.logs import LogTail
    from orchestrator.service.wait import release_failed, release_finished, wait_for_run

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as bar:
        task = bar.add_task("starting", total=None, count="")
        tail = LogTail(ctx, record)

        def show(view):
            for line in tail.new_lines():
                bar.console.print(line, style="dim", markup=False, highlight=False)
            status = view.status
            if status is not None:
                total = status.total or None
                count = f"{status.done}/{status.total}" if total else ""
                # The message leads with where the timing's sampling stands ("look 2/3, 1/2
                # decided": benches/sequential.py), then what it does now.
                label = f"{status.phase:<11} {markup_safe(status.message[:48]):<48}"
                bar.update(task, description=label, completed=status.done, total=total, count=count)

        final = wait_for_run(ctx, record, show)
    if final.manifest is None:
        release_failed(ctx, record)
        raise ResultsError(
            f"run {record.run_id} failed: {final.console_reason} (from its serial console: no "
            "manifest reached the bucket); its VM was deleted"
        )
    released = release_finished(ctx, record)
    if released:
        out.print(f"bench: {released}")
    manifest = final.manifest
    colour = {"complete": "green", "partial": "yellow"}.get(manifest.status, "red")
    reason = f": {markup_safe(manifest.reason)}" if manifest.reason else ""
    out.print(f"bench: run {record.run_id} [bold {colour}]{manifest.status}[/]{reason}")
    from orchestrator.cli.options import bench_command

    out.print(f"fetch the results with: {bench_command()} fetch {record.run_id}")
    if manifest.status != "complete":
        raise ResultsError(f"run {record.run_id} ended {manifest.status}: {manifest.reason}")
    return 0
