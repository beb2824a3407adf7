"""setup: the least-privilege one-time setup of a project, for each backend it serves.

The steps are each backend's own (`SetsUpProject`: backends/gce/setup.py, then
backends/batch/setup.py when Cloud Batch is in use; each says what a step grants and why);
this use case picks the backends as `bench doctor` does and refuses one that has nothing to
set up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from orchestrator.backends.base import SetsUpProject, SetupStep
from orchestrator.errors import UsageError
from orchestrator.service.context import Context
from orchestrator.service.doctor import projects_in_use


@dataclass(frozen=True)
class BackendSetup:
    backend: str
    steps: list[SetupStep]
    followups: list[str]  # what the user does once the steps are done, one line each


@dataclass(frozen=True)
class SetupPlan:
    parts: list[BackendSetup]  # in order: a later backend's grants name an earlier's account

    @property
    def steps(self) -> list[SetupStep]:
        return [step for part in self.parts for step in part.steps]

    @property
    def followups(self) -> list[str]:
        return [line for part in self.parts for line in part.followups]


def plan_setup(
    ctx: Context, backend: str | None = None, launchers: Sequence[str] = ()
) -> SetupPlan:
    """Every step, printed before anything is done; `backend`: that one alone (UsageError
    when it has nothing to set up); `launchers`: the IAM members who will launch runs
    (UsageError on one that is not a member's form, before any step is done)."""
    names = [backend] if backend else projects_in_use(ctx.config)
    parts = []
    for name in names:
        prepared = ctx.backend(name)
        if isinstance(prepared, SetsUpProject):
            steps = prepared.setup_steps(launchers)
            parts.append(BackendSetup(name, steps, prepared.setup_followups(launchers)))
        elif backend:
            raise UsageError(f"the {name} backend has nothing to set up")
    return SetupPlan(parts)


def apply_setup(
    ctx: Context,
    plan: SetupPlan,
    on_done: Callable[[SetupStep, str], None],
    on_wait: Callable[[SetupStep, float], None] = lambda step, delay: None,
) -> None:
    """Each backend's steps in order; `on_wait(step, seconds)` before a retry of a grant
    that a new account is not visible to yet."""
    for part in plan.parts:
        prepared = cast(SetsUpProject, ctx.backend(part.backend))  # plan_setup chose it so
        prepared.apply_setup(part.steps, on_done, on_wait)
