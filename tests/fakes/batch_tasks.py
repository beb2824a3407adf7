"""The task of a fake Batch job: attempts of the job's script in a VmSandbox, as Batch runs
them. Each rule below is Google's, with the page that says it:

- A job waits QUEUED until its VMs can be created; "Batch ... keeps trying" while a
  location has no capacity (https://cloud.google.com/batch/docs/troubleshooting, "Job is
  stuck in the QUEUED state"): a stockout here keeps the job QUEUED until it is lifted.
- States: QUEUED -> SCHEDULED -> RUNNING -> SUCCEEDED or FAILED (JobStatus.State,
  https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs#State);
  a task: PENDING -> ASSIGNED ("assigned to at least one VM") -> RUNNING -> SUCCEEDED or
  FAILED (TaskStatus.State,
  https://cloud.google.com/dotnet/docs/reference/Google.Cloud.Batch.V1/latest/Google.Cloud.Batch.V1.TaskStatus.Types.State);
  each attempt is on a new VM, so a retried task is PENDING, then ASSIGNED again
  (https://cloud.google.com/batch/docs/automate-task-retries). Task events carry taskState,
  and taskExecution.exitCode where the task fails
  (https://cloud.google.com/batch/docs/reference/rest/v1/StatusEvent).
- A task runs its runnables in order; a non-zero exit fails the attempt
  (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs#Runnable).
- maxRunDuration bounds one attempt; past it the task fails with exit code 50005, a
  preempted VM gives 50001, a recreated VM 50006
  (https://cloud.google.com/batch/docs/troubleshooting#reserved-exit-codes).
- A failed attempt is retried while retries remain (maxRetryCount, 0-10). With
  lifecyclePolicies, an exit code a policy names takes that policy's action and every other
  code the opposite one (https://cloud.google.com/batch/docs/automate-task-retries).
- The task sees BATCH_TASK_INDEX and BATCH_TASK_RETRY_ATTEMPT, and the taskSpec's
  environment variables (https://cloud.google.com/batch/docs/create-run-job#environment-variables).
- A spot VM being preempted gets ACPI soft-off and 30 s before it stops
  (https://cloud.google.com/compute/docs/instances/spot#preemption-process).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .vm_sandbox import VmSandbox

PREEMPTED, MAX_RUN_DURATION_EXCEEDED, VM_RECREATED = 50001, 50005, 50006
_ids = itertools.count(1)


CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def vm_account(project: str, job_body: dict[str, Any]) -> dict[str, Any]:
    """The service account a job's VMs run as, with the scopes their token carries: those the
    job names and cloud-platform, which Batch adds."""
    from .compute_state import project_number

    named = (job_body.get("allocationPolicy") or {}).get("serviceAccount") or {}
    email = named.get("email") or f"{project_number(project)}-compute@developer.gserviceaccount.com"
    scopes = [*(named.get("scopes") or []), CLOUD_PLATFORM_SCOPE]
    return {"email": email, "scopes": list(dict.fromkeys(scopes))}


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds_of(duration: str) -> float:
    """A google.protobuf.Duration in JSON ("1889s", "1.5s")."""
    found = re.fullmatch(r"(-?[0-9]+(?:\.[0-9]+)?)s", duration or "")
    if not found:
        raise ValueError(f"not a Duration: {duration!r}")
    return float(found[1])


@dataclass
class FakeVm:
    """The Compute Engine VM Batch made for one attempt, as the metadata server shows it."""

    project: str
    zone: str
    name: str
    sent: dict[str, Any]
    id: str = field(default_factory=lambda: str(next(_ids)))
    preempted: bool = False
    sandbox: VmSandbox | None = None

    def metadata_value(self, key: str) -> str | None:
        return None

    def metadata_keys(self) -> list[str]:
        return []


@dataclass
class FakeJob:
    body: dict[str, Any]  # what jobs.get answers
    region: str
    state: str = "QUEUED"
    task_state: str = "PENDING"
    attempt: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    task_events: list[dict[str, Any]] = field(default_factory=list)
    vm: FakeVm | None = None
    deleted: bool = False
    preempt_after_s: float | None = None  # the next attempt's VM is preempted this long in
    log: list[str] = field(default_factory=list)
    attempts_exit_codes: list[int] = field(default_factory=list)
    # Each attempt's time on its VM, from its ASSIGNED event to the event that ended it (the
    # events' own timestamps): what the VM billed, for tests to compare bench's cost with.
    vm_seconds: list[float] = field(default_factory=list)
    assigned_at: str = ""

    @property
    def name(self) -> str:
        return self.body["name"]

    @property
    def task_spec(self) -> dict[str, Any]:
        return self.body["taskGroups"][0]["taskSpec"]

    def event(self, kind: str, description: str) -> None:
        self.events.append({"type": kind, "description": description, "eventTime": now_rfc3339()})

    def task_event(self, state: str, description: str, exit_code: int | None = None) -> None:
        moment = now_rfc3339()
        entry: dict[str, Any] = {
            "type": "STATUS_CHANGED",
            "description": description,
            "eventTime": moment,
            "taskState": state,
        }
        if exit_code is not None:
            entry["taskExecution"] = {"exitCode": exit_code}
        self.task_events.append(entry)
        if state == "ASSIGNED":
            self.assigned_at = moment
        elif state in ("FAILED", "SUCCEEDED") and self.assigned_at:
            self.vm_seconds.append((_parse(moment) - _parse(self.assigned_at)).total_seconds())
            self.assigned_at = ""
        self.task_state = state


def _parse(rfc3339: str) -> datetime:
    return datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


def retried(task_spec: dict[str, Any], exit_code: int, attempt: int) -> bool:
    """Whether Batch retries an attempt that ended with `exit_code` (automate-task-retries)."""
    if attempt >= int(task_spec.get("maxRetryCount", 0)):
        return False
    policies = task_spec.get("lifecyclePolicies") or []
    if not policies:
        return True  # retry for all failures
    for policy in policies:
        if exit_code in (policy.get("actionCondition") or {}).get("exitCodes", []):
            return policy.get("action") == "RETRY_TASK"
    # "The opposite action is taken for all unspecified failures."
    return all(policy.get("action") == "FAIL_TASK" for policy in policies)


class TaskRunner:
    """Runs one job's task in a thread; the stand-in passes what it needs."""

    def __init__(self, server: Any, job: FakeJob) -> None:
        self.server = server
        self.job = job
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def cancel(self) -> None:
        """The job is being deleted: its VM goes with it."""
        self._stop.set()
        vm = self.job.vm
        if vm is not None and vm.sandbox is not None:
            vm.sandbox.kill_now()

    def _set(self, state: str, why: str) -> None:
        with self.server.lock:
            if self.job.deleted:
                return
            self.job.state = state
            self.job.event("STATUS_CHANGED", f"Job state is set from {why}")

    def _run(self) -> None:
        job = self.job
        while not self._stop.is_set() and self.server.stocked_out(job):
            time.sleep(0.05)  # QUEUED: Batch keeps trying
        if self._stop.is_set():
            return
        self._set("SCHEDULED", "QUEUED to SCHEDULED")
        job.task_event("ASSIGNED", "Task state is updated from PENDING to ASSIGNED")
        self._set("RUNNING", "SCHEDULED to RUNNING")
        spec = job.task_spec
        while not self._stop.is_set():
            code = self._attempt(spec)
            job.attempts_exit_codes.append(code)
            if code == 0:
                job.task_event("SUCCEEDED", "Task state is updated from RUNNING to SUCCEEDED")
                self._set("SUCCEEDED", "RUNNING to SUCCEEDED")
                return
            description = f"Task state is updated from RUNNING to FAILED with exit code {code}"
            if self._stop.is_set():
                return
            if retried(spec, code, job.attempt):
                job.task_event("FAILED", description + "; the task is retried", code)
                job.attempt += 1
                job.task_event("PENDING", "Task state is updated from FAILED to PENDING")
                continue
            job.task_event("FAILED", description, code)
            self._set("FAILED", f"RUNNING to FAILED: task 0 failed with exit code {code}")
            return

    def _attempt(self, spec: dict[str, Any]) -> int:
        """One attempt on a new VM: the script's exit code, or Batch's own."""
        job, server = self.job, self.server
        policy = job.body["allocationPolicy"]["instances"][0]["policy"]
        zones = job.body["allocationPolicy"]["location"]["allowedLocations"]
        zone = zones[0].removeprefix("zones/")
        vm = FakeVm(
            project=server.project,
            zone=zone,
            name=f"{job.name.rsplit('/', 1)[-1][:40]}-{job.attempt}",
            sent={
                "machineType": policy["machineType"],
                "scheduling": {"provisioningModel": policy.get("provisioningModel", "STANDARD")},
                "serviceAccounts": [vm_account(server.project, job.body)],
            },
        )
        if job.task_state == "PENDING":  # a retry: a new VM is assigned
            job.task_event("ASSIGNED", "Task state is updated from PENDING to ASSIGNED")
        job.task_event("RUNNING", f"Task state is updated from ASSIGNED to RUNNING on {zone}")
        env = dict(os.environ)
        env.update(server.vm_env)
        env.update((spec.get("environment") or {}).get("variables") or {})
        env.update(BATCH_TASK_INDEX="0", BATCH_TASK_RETRY_ATTEMPT=str(job.attempt))
        if server.vm_path:
            env["PATH"] = ":".join([*server.vm_path, env.get("PATH", "")])
        root = Path(tempfile.mkdtemp(prefix="batch-vm-", dir=server.sandbox_root))
        vm.sandbox = VmSandbox(
            root, vm.name, f"{server.endpoint}/_fake/poweroff", env, job.log.append
        )
        with server.lock:
            job.vm = vm
        script = "\n".join(r["script"]["text"] for r in spec["runnables"])
        if server.script_override is not None:
            script = server.script_override
        vm.sandbox.start(script if server.run_scripts else "exit 0")
        started = time.monotonic()
        limit = seconds_of(spec.get("maxRunDuration", "604800s")) / server.time_scale
        while not vm.sandbox.startup_finished():
            elapsed = time.monotonic() - started
            if self._stop.is_set():
                return -1
            # Read live, not when the attempt began: a test injects right after create,
            # and on a loaded machine this attempt may already have started by then.
            preempt_at = job.preempt_after_s
            if preempt_at is not None and elapsed >= preempt_at:
                job.preempt_after_s = None  # one preemption per injection
                vm.preempted = True  # the metadata server says so before SIGTERM
                vm.sandbox.power_off(server.preemption_grace_s, None)
                vm.sandbox.halted.wait(server.preemption_grace_s + 30)
                return PREEMPTED
            if elapsed >= limit:
                vm.sandbox._signal_all(signal.SIGKILL)
                vm.sandbox.kill_now()
                return MAX_RUN_DURATION_EXCEEDED
            time.sleep(0.02)
        code = vm.sandbox.startup_exit_code
        return 1 if code is None else code
