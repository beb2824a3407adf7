"""doctor: is this project ready for a launch? One line per check, ✓ or ✗ with its fix.

The checks are each backend's own (`ChecksProject`: backends/gce/doctor.py,
backends/batch/doctor.py); this use case picks the backends: the first billed one registered
(the project itself: credentials, Compute, quota, bucket, IAM), then every other billed one
these settings use (those `stop-all` searches: Cloud Batch once configured or used here).
"""

from __future__ import annotations

import shutil
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


GCLOUD_INSTALL = "cloud.google.com/sdk/docs/install"


def settings_checks(config: BenchConfig) -> list[Check]:
    """What this machine and the settings must hold before a project can be asked: gcloud
    (the credentials' login and `bench setup`'s commands), a project and a bucket."""
    gcloud = shutil.which("gcloud")
    return [
        Check(
            "gcloud installed",
            gcloud is not None,
            gcloud or "no gcloud on PATH",
            f"install the Google Cloud CLI ({GCLOUD_INSTALL}): credentials come from "
            "`gcloud auth application-default login`, and `bench setup` prints gcloud commands",
            # Credentials may come without it (a key file, CI's workload identity).
            required=False,
        ),
        Check(
            "project set",
            bool(config.project),
            config.project or "no project in bench.toml, BENCH_PROJECT or --project",
            'set project = "my-project" in bench.toml (README: "Pointing bench at a GCP project")',
        ),
        Check(
            "bucket set",
            bool(config.bucket),
            f"gs://{config.bucket}" if config.bucket else "no bucket in bench.toml or BENCH_BUCKET",
            'set bucket = "my-bench-results" in bench.toml; `bench setup` creates it',
        ),
    ]


def run_doctor(
    ctx: Context,
    gpu_keys: list[str] | None = None,
    probe: bool = False,
    backend: str | None = None,
) -> Iterator[Check]:
    """Every check of each backend's project, in order (UsageError first when the settings
    lack what the first needs). `gpu_keys` (launch --gpu): each GPU type's shape in its own
    zones, and quota for all of them at once. `probe`: then a tiny machine proves the run's
    account works, unless the checks it depends on failed. `backend`: that one alone."""
    names = [backend] if backend else projects_in_use(ctx.config)
    settings = settings_checks(ctx.config)
    yield from settings
    missing = [c.name.removesuffix(" set") for c in settings[1:] if not c.ok]
    if missing:
        for name in names:
            checklist = getattr(registry.backend_class(name), "doctor_checklist", None)
            yield from not_run(checklist() if checklist else (), " and ".join(missing))
        return
    for name in names:
        checked = ctx.backend(name)
        if isinstance(checked, ChecksProject):
            yield from checked.doctor_checks(gpu_keys, probe)
        elif backend:
            raise UsageError(f"the {name} backend has no project to check")
