"""`bench doctor --probe`: a real check before any GPU money. A tiny spot VM (no GPU) runs as
the VM account, writes one object under its run's key and deletes itself; doctor watches
from outside and reports each step with the time since the probe began: created, object
seen, VM gone. Whatever is left at the end (the VM, the object) is deleted, or named with
the command that deletes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from orchestrator.backends.base import Check
from orchestrator.backends.gce.builder import RUN_LABEL, label_filter
from orchestrator.backends.gce.failover import place
from orchestrator.backends.gce.probe import (
    PROBE_MACHINE_TYPE,
    PROBE_MAX_RUN_SECONDS,
    ProbeRun,
    build_probe_instance,
    new_probe_run,
    render_probe_script,
)
from orchestrator.errors import BenchError
from orchestrator.users import owner_label

if TYPE_CHECKING:
    from orchestrator.backends.gce.compute import ComputeApi
    from orchestrator.config import BenchConfig
    from orchestrator.stores.gcs import GcsStore

# How long doctor waits for each step: a debian image boots in well under a minute, and a
# VM's own delete takes a minute or two.
OBJECT_TIMEOUT_SECONDS = 300.0
GONE_TIMEOUT_SECONDS = 300.0


def run_probe(
    config: BenchConfig,
    api: ComputeApi,
    store: GcsStore,
    poll: float,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Check]:
    probe = new_probe_run()
    started = clock()

    def since() -> str:
        return f"{clock() - started:.0f} s"

    zone, problem = _create(api, config, store, probe)
    if zone is None:
        yield Check("probe VM created", False, problem, _fix_for(problem))
    else:
        yield Check(
            "probe VM created",
            True,
            f"{probe.instance_name} running in {zone} at {since()} ({PROBE_MACHINE_TYPE}, "
            f"spot, no GPU; GCE deletes it after {PROBE_MAX_RUN_SECONDS // 60} min at most)",
        )
        uri = store.uri(probe.object_key)
        wrote = _wait_for(lambda: store.exists(probe.object_key), OBJECT_TIMEOUT_SECONDS, poll)
        if wrote:
            yield Check("probe object seen", True, f"{uri}, written by the VM, at {since()}")
        else:
            yield _no_object(uri, api, zone, probe)
        gone = _wait_for(
            lambda: api.get(zone, probe.instance_name) is None, GONE_TIMEOUT_SECONDS, poll
        )
        if gone:
            detail = f"{probe.instance_name} deleted itself, disk included, at {since()}"
            yield Check("probe VM gone", True, detail)
        else:
            yield _not_gone(probe, wrote)
    yield _clean_up(api, store, config.project, probe)


def _create(api, config, store, probe: ProbeRun) -> tuple[str | None, str]:
    """(zone, "") once it runs, or (None, why not)."""
    owner = owner_label(config.owner)
    try:
        script = render_probe_script(config, probe, store)
        landed = place(
            config.zones,
            lambda zone, spot: build_probe_instance(config, zone, probe, script, owner),
            api.insert,
            spot=True,
            suggest_on_demand=False,
        )
    except BenchError as e:
        return None, f"{probe.instance_name} could not start: {e}"
    return landed.zone, ""


def _fix_for(problem: str) -> str:
    if "service account" in problem:
        return "see the `act as the VM account` line above"
    return "fix what the message says, then run `bench doctor --probe` again"


def _wait_for(done: Callable[[], bool], timeout: float, poll: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if done():
                return True
        except BenchError:
            pass  # a read that failed now may answer on the next poll
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def _no_object(uri: str, api, zone: str, probe: ProbeRun) -> Check:
    try:
        output = api.serial_output(zone, probe.instance_name, 0)
    except BenchError:
        output = None
    tail = " | ".join((output.contents if output else "").strip().splitlines()[-3:])
    return Check(
        "probe object seen",
        False,
        f"no {uri} after {OBJECT_TIMEOUT_SECONDS:.0f} s; the VM's console ends: {tail or '-'}",
        "see the `VM bucket access` line; `bench setup --apply` grants the VM account its "
        "run's objects",
    )


def _not_gone(probe: ProbeRun, wrote: bool) -> Check:
    detail = f"{probe.instance_name} still exists {GONE_TIMEOUT_SECONDS:.0f} s later"
    if wrote:
        detail += ": it wrote its object, but its own delete was refused"
    return Check(
        "probe VM gone", False, detail, "see the `VM self-delete` line; `bench setup --apply`"
    )


def _clean_up(api, store, project: str, probe: ProbeRun) -> Check:
    """Delete what is left (found by the probe's run label, wherever an insert landed) and
    say what could not be deleted, with the command that deletes it."""
    left = []
    try:
        found = api.list_instances(label_filter(RUN_LABEL, probe.run_id))
    except BenchError as e:
        found = []
        left.append(f"cannot list instances ({e}): `bench stop-all` finds and deletes it")
    deleted = []
    for zone, instance in found:
        try:
            api.delete(zone, instance.name)
            deleted.append(instance.name)
        except BenchError as e:
            left.append(
                f"VM {instance.name} ({e}): gcloud compute instances delete {instance.name} "
                f"--zone {zone} --project {project}"
            )
    uri = store.uri(probe.object_key)
    try:
        if store.exists(probe.object_key):
            store.delete(probe.object_key)
    except BenchError as e:
        left.append(f"object {uri} ({e}): gcloud storage rm {uri}")
    if left:
        return Check(
            "probe leftovers", False, "could not delete " + "; ".join(left), "run what is named"
        )
    if deleted:
        return Check("probe leftovers", True, f"none: doctor deleted {', '.join(deleted)}")
    return Check("probe leftovers", True, "none: the probe VM, its disk and its object are gone")
