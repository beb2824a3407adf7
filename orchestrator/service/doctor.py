"""doctor: is this project ready for a launch? One line per check, ✓ or ✗ with its fix.

The checks are each backend's own (`ChecksProject`: backends/gce/doctor.py,
backends/batch/doctor.py); this use case picks the backends: the first billed one registered
(the project itself: credentials, Compute, quota, bucket, IAM), then every other billed one
these settings use (those `stop-all` searches: Cloud Batch once configured or used here).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.backends import registry
from orchestrator.backends.base import Check, ChecksProject, not_run
from orchestrator.config import BenchConfig
from orchestrator.errors import UsageError
from orchestrator.service.context import Context


def projects_in_use(config: BenchConfig) -> list[str]:
    """The first billed backend, then every other billed backend these settings use (the
    ones `stop-all` searches): what `bench doctor` checks and `bench setup` prepares."""
    first = registry.default_cloud()
    used = [
        name
        for name in registry.searchable(config)
        if name != first and registry.capabilities(name).billed
    ]
    return [first, *used]


def run_doctor(
    ctx: Context,
    gpu_keys: list[str] | None = None,
    probe: bool = False,
    backend: str | None = None,
) -> Iterator[Check]:
    """Every check of each backend's project, in order, after its preflight (gce: gcloud,
    project and bucket set; an unset one lists the checklist as not run). `gpu_keys`
    (launch --gpu): each GPU type's shape in its own zones, and quota for all of them at
    once. `probe`: then a tiny machine proves the run's
    account works, unless the checks it depends on failed. `backend`: that one alone."""
    names = [backend] if backend else projects_in_use(ctx.config)
    for name in names:
        # What this machine and the settings must hold before the project can be asked
        # (gce: gcloud, a project, a bucket); with a required one missing, its checklist is
        # listed as not run.
        preflight = getattr(registry.backend_class(name), "doctor_preflight", None)
        settings = preflight(ctx.config) if preflight else []
        yield from settings
        missing = [c.name.removesuffix(" set") for c in settings if c.required and not c.ok]
        if missing:
            checklist = registry.backend_class(name).doctor_checklist()
            yield from not_run(checklist, " and ".join(missing))
            return
        checked = ctx.backend(name)
        if isinstance(checked, ChecksProject):
            yield from checked.doctor_checks(gpu_keys, probe)
        elif backend:
            raise UsageError(f"the {name} backend has no project to check")
