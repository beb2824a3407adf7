"""A run's log: every line (`bench logs`), or the script's own new lines (`launch --wait`).

Lines come from the run's machine, so they are untrusted: both readers hand them out only
through `printable` (no control characters)."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.errors import BenchError
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.service.runs import latest_run_id, placement_of
from orchestrator.text import printable


def log_lines(ctx: Context, run_id: str | None, follow: bool) -> Iterator[str]:
    """The log of RUN_ID (else the latest run), line by line; with `follow`, until it ends."""
    record = ctx.registry.get(run_id or latest_run_id(ctx))
    backend = ctx.backend(record.backend)
    for line in backend.log_lines(record.run_id, placement_of(record), follow):
        yield printable(line)


class LogTail:
    """New `[bench ...]` lines of the run's log since the last call (the script's own lines,
    without the VM's boot chatter on the serial port)."""

    def __init__(self, ctx: Context, record: RunRecord):
        self.backend, self.record = ctx.backend(record.backend), record
        self.placement = placement_of(record)
        self.offset, self.partial = 0, ""

    def new_lines(self) -> list[str]:
        try:
            text, self.offset = self.backend.log_since(
                self.record.run_id, self.placement, self.offset
            )
        except BenchError:
            return []  # the log is a courtesy; the heartbeat decides progress
        lines = (self.partial + text).replace("\r\n", "\n").split("\n")
        self.partial = lines.pop()
        return [printable(line[line.index("[bench ") :]) for line in lines if "[bench " in line]
