"""What a Batch job may bill, and so how long each attempt may run and how often it may be
retried: every attempt of every task must fit the run's budget at the catalog rate.

maxRunDuration bounds one attempt of a task from the moment its runnables start
(https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs, TaskSpec);
the VM Batch creates for it boots and installs the GPU driver before that, and a retry is a
new attempt with its own maxRunDuration (https://cloud.google.com/batch/docs/automate-task-retries).
So the worst case of a job is tasks × (1 + maxRetryCount) × the worst case of one attempt,
which `pricing.worst_case_usd` prices with the VM setup below added to its time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.backends.base import BudgetTerms
from orchestrator.backends.gce import pricing
from orchestrator.errors import RefusedError
from orchestrator.text import format_duration

# Booting Batch's VM bills before the task's maxRunDuration starts. Priced, not enforced: an
# allowance of bench's, like the operation deadlines gce/pricing.py holds back for GCE. Google
# documents no bound on a VM's boot; the one it enforces on a job's VM time, "Run time
# (duration of RUNNING job state) before automatic failure: 14 days"
# (https://cloud.google.com/batch/quotas, Job limits), would price every attempt at two
# weeks. The job asks for no driver install (builder.INSTALL_GPU_DRIVERS: the image has its
# driver), which took most of the time this allowance was first made for.
VM_SETUP_SECONDS = 600
# Batch takes 0 to 10 retries (https://cloud.google.com/batch/docs/automate-task-retries);
# bench asks for at most this many, fewer when the budget cannot pay for them.
WANTED_RETRIES = 3
MAX_RETRY_COUNT = 10


@dataclass(frozen=True)
class AttemptPlan:
    attempt_seconds: int  # each task's maxRunDuration
    retries: int  # its maxRetryCount
    task_count: int
    attempt_usd: float  # the worst case of one attempt
    worst_case_usd: float  # of every attempt of every task

    @property
    def attempts(self) -> int:
        return self.task_count * (1 + self.retries)

    def terms(self, rate: pricing.HourlyRate) -> BudgetTerms:
        """What launch configures and `bench prices` shows, in the same words."""
        retries = f"{self.retries} {'retry' if self.retries == 1 else 'retries'} on preemption"
        summary = (
            f"{self.attempts} {'attempt' if self.attempts == 1 else 'attempts'} of ≤ "
            f"{format_duration(self.attempt_seconds)} each (maxRunDuration; {retries}), "
            f"each after up to {format_duration(VM_SETUP_SECONDS)} of VM setup: "
            f"${self.worst_case_usd:.2f} at worst at ${rate.total:.4f}/h "
            f"({rate.region}, the dearest allowed region)"
        )
        return BudgetTerms(
            self.attempt_seconds,
            self.attempts,
            self.worst_case_usd,
            VM_SETUP_SECONDS,
            rate.region,
            summary,
        )


def attempt_usd(rate: pricing.HourlyRate, attempt_seconds: int) -> float:
    """The worst case of one attempt: its maxRunDuration plus the VM setup before it."""
    return pricing.worst_case_usd(rate, attempt_seconds + VM_SETUP_SECONDS)


def longest_attempt(share_usd: float, rate: pricing.HourlyRate, cap_seconds: int) -> int:
    """The longest maxRunDuration (at most `cap_seconds`) whose attempt fits `share_usd`."""
    seconds = min(pricing.max_run_seconds_for(share_usd, rate) - VM_SETUP_SECONDS, cap_seconds)
    while seconds > 0 and attempt_usd(rate, seconds) > share_usd:  # float rounding
        seconds -= 1
    return max(seconds, 0)


def plan_attempts(
    budget_usd: float,
    rate: pricing.HourlyRate,
    estimated_seconds: int,
    cap_seconds: int,
    task_count: int = 1,
    wanted_retries: int = WANTED_RETRIES,
) -> AttemptPlan:
    """The most retries (up to `wanted_retries`) for which every attempt still covers the
    plan's estimate and all of them together fit the budget; RefusedError with the figure
    when not even one attempt of each task does (nothing is created)."""
    for retries in range(min(wanted_retries, MAX_RETRY_COUNT), -1, -1):
        attempts = task_count * (1 + retries)
        seconds = longest_attempt(budget_usd / attempts, rate, cap_seconds)
        if seconds > 0 and seconds >= estimated_seconds:
            one = attempt_usd(rate, seconds)
            return AttemptPlan(seconds, retries, task_count, one, attempts * one)
    needed = task_count * attempt_usd(rate, estimated_seconds)
    raise RefusedError(
        f"budget ${budget_usd:.2f} cannot pay for one Batch attempt of the plan: about "
        f"{format_duration(estimated_seconds)} of task plus up to "
        f"{format_duration(VM_SETUP_SECONDS)} of VM setup that Batch bills outside "
        f"maxRunDuration can cost ${needed:.2f} at ${rate.total:.4f}/h; raise --budget "
        "(each retry on preemption costs as much again). Nothing was created"
    )


# A task holds a VM while it is ASSIGNED ("The Task is assigned to at least one VM") or
# RUNNING, and none once it is PENDING ("created and waiting for resources") again, FAILED or
# SUCCEEDED (TaskStatus.State, https://cloud.google.com/dotnet/docs/reference/Google.Cloud.Batch.V1/latest/Google.Cloud.Batch.V1.TaskStatus.Types.State).
# Each stretch on a VM is one attempt: a retry is a new attempt on a new VM
# (https://cloud.google.com/batch/docs/automate-task-retries).
ON_A_VM = ("ASSIGNED", "RUNNING")


def attempt_seconds(events: Iterable[tuple[datetime, str]], now: datetime) -> list[float]:
    """How long each attempt of a task held its VM, from the task's status events as
    (eventTime, taskState) pairs (StatusEvent.taskState: "only defined for task-level status
    events", https://cloud.google.com/batch/docs/reference/rest/v1/StatusEvent); an attempt
    still on its VM counts until `now`. Queueing (the job QUEUED or SCHEDULED, the task
    PENDING) holds no VM and is not in it; the VM's boot before the task is assigned to it is
    not in Batch's events either, and so not in it."""
    spans: list[float] = []
    since: datetime | None = None
    for moment, state in sorted(events, key=lambda event: event[0]):
        if state in ON_A_VM:
            since = since or moment
        elif since is not None:
            spans.append(max((moment - since).total_seconds(), 0.0))
            since = None
    if since is not None:
        spans.append(max((now - since).total_seconds(), 0.0))
    return spans
