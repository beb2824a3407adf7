"""doctor: is this project ready for a launch? One line per check, ✓ or ✗ with its fix.

The checks are the backend's own (`ChecksProject`: backends/gce/doctor.py on gce); this use
case picks the backend and refuses one that has no project to check.
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.backends.base import Check, ChecksProject
from orchestrator.backends.registry import default_cloud
from orchestrator.errors import UsageError
from orchestrator.service.context import Context


def doctor_backend() -> str:
    """The backend `bench doctor` checks: the first billed one registered."""
    return default_cloud()


def run_doctor(
    ctx: Context,
    gpu_keys: list[str] | None = None,
    probe: bool = False,
    backend: str | None = None,
) -> Iterator[Check]:
    """Every check of `backend`'s project, in order (UsageError first when its settings
    lack what it needs). `gpu_keys` (launch --gpu): each GPU type's shape in its own zones,
    and quota for all of them at once. `probe`: then a tiny machine proves the run's
    account works, unless the checks it depends on failed."""
    name = backend or doctor_backend()
    checked = ctx.backend(name)
    if not isinstance(checked, ChecksProject):
        raise UsageError(f"the {name} backend has no project to check")
    yield from checked.doctor_checks(gpu_keys, probe)
