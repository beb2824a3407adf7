"""Waiting for a run: poll the heartbeat, the manifest and the machine until it ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.errors import ResultsError
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.service.runs import RunView, placement_of, view


def wait_for_run(
    ctx: Context, record: RunRecord, on_progress: Callable[[RunView], None]
) -> RunView:
    # A machine may end a moment before its manifest reaches the store.
    grace = ctx.capabilities(record.backend).manifest_grace_seconds
    ended_at = None
    while True:
        current = view(ctx, record)
        if current.problem is not None:
            raise ResultsError(current.problem)
        on_progress(current)
        if current.manifest is not None or current.console_reason:
            return current  # ended: with a manifest, or without one and its console says why
        if current.machine not in ("RUNNING", "WAITING", "PROVISIONING", "STAGING", "STOPPING"):
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > grace:
                why = f" (its log says: {current.console_reason})" if current.console_reason else ""
                raise ResultsError(
                    f"run {record.run_id}: the machine is {current.machine} but left no "
                    f"manifest{why}; see `bench logs {record.run_id}`"
                )
        time.sleep(ctx.poll_interval(record.backend))


# How long a finished VM may take to delete itself or power off before the controller
# deletes it anyway (its manifest is in: the run is over).
SETTLE_SECONDS = 120.0


def release_failed(ctx: Context, record: RunRecord) -> None:
    """A run that ended without a manifest: its VM only waits to be read; delete it now."""
    ctx.backend(record.backend).release(record.run_id, placement_of(record))


def release_finished(ctx: Context, record: RunRecord) -> str:
    """After the manifest: let the VM end (it deletes itself, or powers off), then delete
    what is left so nothing bills. Returns what happened, for the user ("" where a
    machine ends with its run)."""
    capabilities = ctx.capabilities(record.backend)
    if not capabilities.release_after_run:
        return ""
    noun = capabilities.machine_noun
    backend = ctx.backend(record.backend)
    placement = placement_of(record)
    deadline = time.monotonic() + SETTLE_SECONDS
    state = backend.machine_state(record.run_id, placement)
    while state not in ("GONE", "TERMINATED") and time.monotonic() < deadline:
        time.sleep(ctx.poll_interval(record.backend))
        state = backend.machine_state(record.run_id, placement)
    if state == "GONE":
        return f"the {noun} {record.handle} deleted itself"
    backend.release(record.run_id, placement)
    return f"deleted the {noun} {record.handle} (it was {state.lower()})"
