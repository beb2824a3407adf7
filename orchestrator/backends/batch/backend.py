"""BatchBackend: the Backend protocol on Google Cloud Batch (docs/batch.md).

start = one jobs.create: a job of one task that runs gce's startup script (rendered with the
batch partial), on a spot VM Batch creates in one of the allowed zones, installs the GPU
driver on, and deletes when the task ends. Batch queues a job until capacity exists, bounds
each attempt with maxRunDuration and retries a preempted attempt (money.py prices them all).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backends.base import (
    BackendHost,
    BudgetTerms,
    Capabilities,
    Check,
    Machine,
    Placement,
    SetupStep,
)
from orchestrator.backends.batch.api import BatchApi
from orchestrator.backends.batch.builder import build_job, job_parent, job_region, queue_minutes
from orchestrator.backends.batch.money import AttemptPlan, attempt_seconds, plan_attempts
from orchestrator.backends.gce import pricing
from orchestrator.backends.gce.adaptor import message_to_dict
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.backends.gce.builder import MANAGED_LABEL, RUN_LABEL
from orchestrator.backends.gce.pricing import ComputeEnginePricing
from orchestrator.backends.gce.script_vars import template_vars as gce_template_vars
from orchestrator.errors import BenchError, PermissionDeniedError

if TYPE_CHECKING:
    from google.cloud.batch_v1 import Job

    from orchestrator.config import BenchConfig
    from orchestrator.spec import RunSpec
    from orchestrator.stores.gcs import GcsStore

log = logging.getLogger(__name__)

# Job states (JobStatus.State) -> the protocol's. QUEUED: "admitted (validated and persisted)
# and waiting for resources"; SCHEDULED: "scheduled to run as soon as resource allocation is
# ready. The resource allocation may happen at a later time"; RUNNING: "Resource allocation
# has been successful" (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs#State).
# Until RUNNING the run waits for capacity: `status` says so, `--wait` goes on waiting, and
# nothing bills (bench deletes a job still QUEUED past batch_queue_minutes, below).
_STATES = {
    "QUEUED": "WAITING",
    "SCHEDULED": "WAITING",
    "RUNNING": "RUNNING",
    "SUCCEEDED": "TERMINATED",
    "FAILED": "TERMINATED",
    "CANCELLED": "TERMINATED",
    "DELETION_IN_PROGRESS": "STOPPING",
    "CANCELLATION_IN_PROGRESS": "STOPPING",
}
_LIVE = ("QUEUED", "SCHEDULED", "RUNNING")
_PARALLEL_DELETES = 16
WAITING_FOR_CAPACITY = "waiting for capacity"


class BatchBackend(ComputeEnginePricing):
    name = "batch"
    capabilities = Capabilities(
        title="Cloud Batch",
        machine_noun="Batch job",
        target_phrase="the batch target",
        billed=True,
        machine_from_catalog=True,
        always_has_gpu=True,
        sets_up_python=True,  # the same script as gce: the image's python, or a venv
        keeps_files_here=False,
        release_after_run=False,  # Batch deletes the VM when the task ends
        script_partial="batch",
        # The same script on the same machine shapes: gce's phase table, by accelerator.
        phase_model="gce",
        phase_model_by_accelerator=True,
        poll_seconds=10.0,
        heartbeat_seconds=20,
        # The task's output goes to Cloud Logging, which outlives the VM: no need to stay up.
        reason_window_seconds=0,
        manifest_grace_seconds=60.0,
        log_outlives_machine=True,  # Batch keeps a finished job's events
        confines_kernels=True,  # the VM's startup script runs as root
    )

    def __init__(
        self, config: BenchConfig, *, api: BatchApi | None = None, host: BackendHost | None = None
    ) -> None:
        self.config = config
        self.api = api or BatchApi(config)
        self.host = host
        self.stop_failures: dict[str, str] = {}
        self._gave_up: dict[str, str] = {}  # job id -> why bench deleted it (this process)

    # -- registration ------------------------------------------------------------------

    @classmethod
    def create(cls, host: BackendHost) -> BatchBackend:
        cls.require_settings(host.config)
        return cls(host.config, host=host)

    @classmethod
    def create_store(cls, host: BackendHost) -> GcsStore:
        return GceBackend.create_store(host)  # the same bucket layout, the same store

    @classmethod
    def require_settings(cls, config: BenchConfig) -> None:
        GceBackend.require_settings(config)

    @classmethod
    def unsearched_reason(cls, config: BenchConfig) -> str | None:
        """Searched once Batch is in use here: configured as the backend, or a batch run in
        this machine's registry. A gce user's project need not have the Batch API enabled,
        and a kill switch that fails on an API nobody uses would hide the VMs it did stop."""
        if not config.project:
            return "no project configured"
        if config.backend == cls.name or config.batch_endpoint or _batch_runs_here(config):
            return None
        return 'no batch run launched from here (backend = "batch" searches it)'

    @classmethod
    def chosen_by_auto(cls, config: BenchConfig) -> str | None:
        return None  # asked for by name: gce stays what a configured project means

    def template_vars(self) -> dict:
        return {**gce_template_vars(self.config), "self_delete": False}

    def run_access_vars(self, spec: RunSpec) -> dict:
        """The run's own grants, as on gce. They last the 7 days Google allows: Batch may
        start a retried attempt after the first one's cap, and the queue takes its time."""
        from orchestrator.backends.gce.signing import (
            GRANT_MARGIN_SECONDS,
            MAX_GRANT_SECONDS,
            grant_run_access,
        )
        from orchestrator.stores.gcs import GcsStore

        store = self.host.store(self.name) if self.host else GcsStore(self.config)
        seconds = MAX_GRANT_SECONDS - GRANT_MARGIN_SECONDS
        return grant_run_access(self.config, store, spec.run_prefix, seconds).template_vars()

    def work_dir(self, run_id: str) -> str:
        return f"{self.config.vm_work_dir}/{run_id}"

    # -- the job -----------------------------------------------------------------------

    def boot_disk_gb(self) -> int:
        """The boot disk the job asks for, as launch prices it: `disk_gb`, else the price
        catalog's assumed image size (Batch sizes nothing itself then: no read needed)."""
        return pricing.priced_disk_gb(self.config.disk_gb, pricing.load_catalog())

    def hourly_rate(self, spot: bool) -> pricing.HourlyRate:
        """The dearest allowed region's rate, the boot disk at the size the job asks for."""
        return pricing.hourly_rate(self.config, spot=spot, disk_gb=self.boot_disk_gb())

    def attempt_plan(self, spec: RunSpec) -> AttemptPlan:
        """Each attempt's maxRunDuration and the retries the run's budget pays for, at the
        dearest allowed region's rate; RefusedError (exit 3) when not even one attempt fits."""
        rate = self.hourly_rate(spec.spot)
        return plan_attempts(spec.budget_usd, rate, spec.estimated_seconds, spec.max_run_seconds)

    @classmethod
    def budget_terms(
        cls,
        config: BenchConfig,
        budget_usd: float,
        rate: pricing.HourlyRate,
        estimated_seconds: int,
        cap_seconds: int,
    ) -> BudgetTerms:
        """What `bench prices` shows of a Batch run: the attempts the budget buys, as
        `start` configures them (the same plan_attempts, the same words)."""
        return plan_attempts(budget_usd, rate, estimated_seconds, cap_seconds).terms(rate)

    def job(self, spec: RunSpec, startup_script: str) -> Job:
        return build_job(
            spec, self.config, startup_script, self.boot_disk_gb(), self.attempt_plan(spec)
        )

    def instance_request_json(
        self, spec: RunSpec, startup_script: str, shutdown_script: str
    ) -> str:
        """The jobs.create body, as JSON; the script (which `bench render` prints) by size."""
        body = message_to_dict(self.job(spec, startup_script))
        for runnable in body["taskGroups"][0]["taskSpec"]["runnables"]:
            size = len(runnable["script"]["text"].encode())
            runnable["script"]["text"] = f"<{size} bytes: the startup script `bench render` prints>"
        return json.dumps(body, indent=2)

    def start(self, spec: RunSpec, startup_script: str, shutdown_script: str) -> Placement:
        rate = self.hourly_rate(spec.spot)
        attempts = plan_attempts(
            spec.budget_usd, rate, spec.estimated_seconds, spec.max_run_seconds
        )
        job = build_job(spec, self.config, startup_script, self.boot_disk_gb(), attempts)
        region = job_region(self.config)
        created = self.api.create(
            job_parent(self.api.project, region), spec.instance_name, job, str(uuid.uuid4())
        )
        log.info("created %s", created.name)
        note = f"Batch job in {region}: {attempts.terms(rate).summary}"
        return Placement(
            location=region, handle=spec.instance_name, attempts=[note], spot=spec.spot
        )

    def refuse_leftovers(self) -> None:
        return None  # Batch deletes its VMs with their disks when the task ends

    def leftover_note(
        self, run_id: str, disk_usd_per_hour: float, disk_gb: int, cap_seconds: int, most_usd: float
    ) -> str | None:
        return None

    # -- state and logs ----------------------------------------------------------------

    def _name(self, placement: Placement) -> str:
        return f"{job_parent(self.api.project, placement.location)}/jobs/{placement.handle}"

    def machine_state(self, run_id: str, placement: Placement) -> str:
        job = self.api.get(self._name(placement))
        if job is None:
            return "GONE"
        state = job.status.state.name
        if state == "QUEUED" and self._queued_too_long(job):
            self._give_up_waiting(run_id, job)
            return "TERMINATED"  # ended, and `status` reads why from job_events
        return _STATES.get(state, "RUNNING")

    def _queue_minutes(self, job: Job) -> float:
        """The job's own deadline (launch's --queue-minutes, on its label), else ours."""
        return queue_minutes(job.labels, self.config.batch_queue_minutes)

    def _queued_too_long(self, job: Job) -> bool:
        created = job.create_time
        if not created:
            return False
        deadline = timedelta(minutes=self._queue_minutes(job))
        return datetime.now(timezone.utc) - created > deadline

    def _give_up_waiting(self, run_id: str, job: Job) -> None:
        """A job Batch could not place in time: delete it, so a sold-out GPU type does not
        hold its share of the monthly cap; it never had a VM, so it cost nothing."""
        minutes = self._queue_minutes(job)
        why = (
            f"{WAITING_FOR_CAPACITY} for {minutes:g} min (--queue-minutes): bench deleted "
            "the queued job, which never had a VM and cost nothing"
        )
        self.api.delete(job.name, f"bench: still queued after {minutes:g} min")
        self._gave_up[job.name.rsplit("/", 1)[-1]] = why
        if self.host is not None:
            self.host.registry.update(
                run_id,
                state="failed",
                cost_usd=0.0,
                finished_at=datetime.now(timezone.utc).isoformat(),
            )
        log.warning(
            "run %s: %s for %g min; deleted its Batch job", run_id, WAITING_FOR_CAPACITY, minutes
        )

    def billed_seconds(self, run_id: str, placement: Placement) -> list[float] | None:
        """How long each attempt of the job's task held its VM, from the task's status
        events (money.attempt_seconds); None once the job is gone."""
        job = self.api.get(self._name(placement))
        if job is None:
            return None
        spans: list[float] = []
        now = datetime.now(timezone.utc)
        for task in self.api.tasks(job.name):
            events = [
                (event.event_time, event.task_state.name)
                for event in task.status.status_events
                if event.task_state.name != "STATE_UNSPECIFIED" and event.event_time
            ]
            spans += attempt_seconds(events, now)
        return spans

    def job_events(self, placement: Placement) -> list[str]:
        """The job's and its task's state and Batch's status events, one line each."""
        job = self.api.get(self._name(placement))
        if job is None:
            why = self._gave_up.get(placement.handle)
            if why is None:
                return [f"job {placement.handle}: gone"]
            return [f"[bench 00:00:00] run {_run_id_of(placement.handle)} finished: failed ({why})"]
        lines = [f"job {placement.handle}: {_state_phrase(job.status.state.name)}"]
        lines += [
            f"  {e.event_time.isoformat()} {e.type_}: {e.description}"
            for e in job.status.status_events
        ]
        for task in self.api.tasks(job.name):
            lines.append(f"task {task.name.rsplit('/', 1)[-1]}: {task.status.state.name}")
            lines += [
                f"  {e.event_time.isoformat()} {e.description}"
                + (f" (exit code {e.task_execution.exit_code})" if e.task_execution else "")
                for e in task.status.status_events
            ]
        if job.status.state.name == "FAILED":
            # The line the script ends with, when its own could not be written (the attempt
            # was killed): `status` shows Batch's last word on the task as the reason.
            why = next(
                (line.strip() for line in reversed(lines) if line.startswith("  ")), "failed"
            )
            run = job.labels.get(RUN_LABEL, "")
            lines.append(f"[bench 00:00:00] run {run} finished: failed (Batch: {why})")
        return lines

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]:
        """Batch's events; the task's own output is in Cloud Logging (logsPolicy)."""
        yield from self.job_events(placement)
        yield (
            f"the task's output: gcloud logging read 'labels.job_uid=\"...\"' --project "
            f"{self.config.project}, or `bench fetch {run_id}` for its startup.log"
        )

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        text = "\n".join(self.job_events(placement)) + "\n"
        return text[offset:], len(text)

    # -- release and stop-all ----------------------------------------------------------

    def release(self, run_id: str, placement: Placement) -> bool:
        """Delete the run's job while it is queued or running; a finished job bills nothing
        (its VM is gone) and is kept, so `status` can still say how it ended."""
        job = self.api.get(self._name(placement))
        if job is None or job.status.state.name not in _LIVE:
            return False
        return self.api.delete(job.name, f"bench: released run {run_id}")

    def list_machines(self) -> list[Machine]:
        """Every queued or running job labelled bench-managed=true, in every region."""
        machines = []
        try:
            regions = self.api.regions()
        except PermissionDeniedError as e:
            if "SERVICE_DISABLED" in str(e) or "has not been used" in str(e):
                return []  # the Batch API was never enabled: no job can exist
            raise
        for region in regions:
            for job in self.api.jobs(region):
                labels = dict(job.labels)
                if labels.get(MANAGED_LABEL) != "true" or job.status.state.name not in _LIVE:
                    continue
                machines.append(
                    Machine(
                        run_id=labels.get(RUN_LABEL, ""),
                        name=job.name.rsplit("/", 1)[-1],
                        location=region,
                        state=job.status.state.name,
                        rate_usd_per_hour=_rate(region, job),
                    )
                )
        return machines

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """Delete every job in parallel; `stop_failures` says why any is still there."""
        self.stop_failures = {}
        if not machines:
            return []
        with ThreadPoolExecutor(max_workers=min(_PARALLEL_DELETES, len(machines))) as pool:
            done = list(pool.map(self._delete_one, machines))
        return [machine for machine, gone in zip(machines, done, strict=True) if gone]

    def _delete_one(self, machine: Machine) -> bool:
        name = f"{job_parent(self.api.project, machine.location)}/jobs/{machine.name}"
        try:
            self.api.delete(name, "bench stop-all")
        except BenchError as e:
            self.stop_failures[machine.name] = str(e)
            log.warning("could not delete %s in %s: %s", machine.name, machine.location, e)
            return False
        return True

    def powered_off(self) -> list[Machine]:
        return []  # a Batch VM never outlives its task

    def delete_command(self, machine: Machine) -> str:
        return (
            f"gcloud batch jobs delete {machine.name} --location {machine.location} "
            f"--project {self.config.project} --quiet"
        )

    def local_files(self, run_id: str, run_key: str) -> list[Path]:
        return []

    # -- doctor and setup --------------------------------------------------------------

    def doctor_checks(self, gpu_keys: list[str] | None, probe: bool) -> Iterator[Check]:
        """The Batch API, your rights on jobs, the job's VM account's roles (gce's checks,
        which `bench doctor` runs first, cover the project, quota, bucket and actAs)."""
        from orchestrator.backends.batch.doctor import run_checks

        return run_checks(self.config, self.api)

    def setup_steps(self, launchers: Sequence[str] = ()) -> list[SetupStep]:
        """Each of `launchers` may create jobs and act as the VM account (gce's setup lets
        them sign as its signer account)."""
        from orchestrator.backends.batch.setup import setup_steps_for
        from orchestrator.backends.gce.setup import launchers_for

        return setup_steps_for(self.config, launchers_for(launchers))

    def apply_setup(
        self,
        steps: list[SetupStep],
        on_done: Callable[[SetupStep, str], None],
        on_wait: Callable[[SetupStep, float], None],
    ) -> None:
        from orchestrator.backends.batch.setup import apply_setup

        apply_setup(self.config, steps, on_done, on_wait)

    def setup_followups(self, launchers: Sequence[str] = ()) -> list[str]:
        from orchestrator.backends.batch.setup import setup_followups
        from orchestrator.backends.gce.setup import launchers_for

        return setup_followups(self.config, launchers_for(launchers))


def _batch_runs_here(config: BenchConfig) -> bool:
    from orchestrator.paths import state_paths
    from orchestrator.registry import RunRegistry

    path = state_paths(config).registry
    if not path.exists():
        return False
    return any(record.backend == BatchBackend.name for record in RunRegistry(path).all())


def _run_id_of(job_id: str) -> str:
    """bench-<run id> (or a run's from before issue 50, bench-<run id>-<secret>) -> <run id>
    (results_schema/names.py's instance name)."""
    return "-".join(job_id.removeprefix("bench-").split("-")[:3])


def _state_phrase(state: str) -> str:
    return f"{state} ({WAITING_FOR_CAPACITY})" if _STATES.get(state) == "WAITING" else state


def _rate(region: str, job: Job) -> float:
    """What the job's VM bills per hour while it runs; 0 when not priced (still deleted)."""
    try:
        policy = job.allocation_policy.instances[0].policy
        accelerators = list(policy.accelerators)
        rate = pricing.machine_rate(
            region=region,
            machine_type=policy.machine_type,
            accelerator_type=accelerators[0].type_ if accelerators else "",
            accelerator_count=sum(a.count for a in accelerators),
            disk_gb=int(policy.boot_disk.size_gb) or 50,
            spot=policy.provisioning_model.name == "SPOT",
        )
    except (BenchError, IndexError):
        return 0.0
    return rate.total
