"""setup: the least-privilege one-time setup of a backend's project.

The steps are the backend's own (`SetsUpProject`: backends/gce/setup.py on gce, which says
what each step grants and why); this use case picks the backend and refuses one that has
nothing to set up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.backends.base import SetsUpProject, SetupStep
from orchestrator.backends.registry import default_cloud
from orchestrator.errors import UsageError
from orchestrator.service.context import Context


@dataclass(frozen=True)
class SetupPlan:
    backend: str
    steps: list[SetupStep]
    followups: list[str]  # what the user does once the steps are done, one line each


def setup_backend() -> str:
    """The backend `bench setup` prepares: the first billed one registered."""
    return default_cloud()


def plan_setup(ctx: Context, backend: str | None = None) -> SetupPlan:
    name = backend or setup_backend()
    prepared = _sets_up(ctx, name)
    return SetupPlan(name, prepared.setup_steps(), prepared.setup_followups())


def apply_setup(
    ctx: Context,
    plan: SetupPlan,
    on_done: Callable[[SetupStep, str], None],
    on_wait: Callable[[SetupStep, float], None] = lambda step, delay: None,
) -> None:
    """Each step in order; `on_wait(step, seconds)` before a retry of a grant that a new
    account is not visible to yet."""
    _sets_up(ctx, plan.backend).apply_setup(plan.steps, on_done, on_wait)


def _sets_up(ctx: Context, name: str) -> SetsUpProject:
    backend = ctx.backend(name)
    if not isinstance(backend, SetsUpProject):
        raise UsageError(f"the {name} backend has nothing to set up")
    return backend
