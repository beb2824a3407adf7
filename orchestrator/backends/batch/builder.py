"""Pure builder: RunSpec -> batch_v1.Job, one task running bench's startup script.

Field by field (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs):
one task group ("Only one TaskGroup is supported now") of one task; the machine shape, the
accelerator, spot provisioning, installGpuDrivers and the boot image are the instance policy;
allowedLocations are the configured zones of the job's region; labels go on the job and,
through allocationPolicy.labels, on the VMs. Nothing here talks to the network.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from orchestrator.backends.batch.adaptor import batch_v1
from orchestrator.backends.batch.money import AttemptPlan
from orchestrator.backends.gce.builder import (
    _require_name,
    run_labels,
    vm_may_delete_itself,
)
from orchestrator.config import region_of
from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from google.cloud.batch_v1 import Job

    from orchestrator.config import BenchConfig
    from orchestrator.spec import RunSpec

# Batch's own exit codes for a task whose VM went away under it
# (https://cloud.google.com/batch/docs/troubleshooting#reserved-exit-codes): 50001 the VM was
# preempted, 50006 the VM was recreated (host maintenance). Only these are retried: any other
# failure (50005 maxRunDuration reached, the script's own non-zero exit) fails the task, as
# "the opposite action is taken for all unspecified failures"
# (https://cloud.google.com/batch/docs/automate-task-retries).
RETRIED_EXIT_CODES = (50001, 50006)
# The task reads how many retries its job has (the batch partial: a preempted attempt with a
# retry to come leaves the manifest, the commit marker, to that retry).
RETRIES_VARIABLE = "BENCH_BATCH_MAX_RETRIES"
BOOT_DISK_TYPE = "pd-balanced"


def job_region(config: BenchConfig) -> str:
    """The region a run's job is created in: the first configured zone's."""
    return region_of(config.zones[0])


def allowed_zones(config: BenchConfig) -> list[str]:
    """The configured zones of the job's region: Batch places the VM in any of them."""
    region = job_region(config)
    return [zone for zone in config.zones if region_of(zone) == region]


def job_parent(project: str, region: str) -> str:
    return f"projects/{project}/locations/{region}"


# The job carries its own queue deadline, so whichever controller polls it later (a
# `bench status` without the launch's --queue-minutes) deletes it on the launch's terms.
QUEUE_SECONDS_LABEL = "bench-queue-seconds"


def queue_label(config: BenchConfig) -> dict[str, str]:
    """The job's label holding batch_queue_minutes, in whole seconds (a label value is
    lowercase letters, digits, '-' and '_')."""
    return {QUEUE_SECONDS_LABEL: str(max(1, math.ceil(config.batch_queue_minutes * 60)))}


def queue_minutes(labels: Mapping[str, str], default: float) -> float:
    """The deadline a job was launched with, read back from its labels (the cloud's answer:
    anything but 1 to 8 digits means `default`)."""
    value = labels.get(QUEUE_SECONDS_LABEL, "")
    return int(value) / 60 if re.fullmatch(r"[0-9]{1,8}", value) and int(value) else default


def build_job(
    spec: RunSpec,
    config: BenchConfig,
    startup_script: str,
    disk_gb: int,
    attempts: AttemptPlan,
) -> Job:
    """The jobs.create body for one run. The startup script is gce's, rendered with the
    batch partial; GCE's shutdown script has no Batch counterpart (the script's own TERM
    trap flushes what was measured, as on a preempted GCE VM)."""
    _require_name("job id", spec.instance_name)
    _require_name("machine type", config.machine_type)
    _require_name("accelerator type", config.accelerator_type)
    _require_name("image family", config.image_family)
    if not startup_script:
        raise UsageError("the batch task has no script to run")
    labels = {**run_labels(spec.run_id, spec.owner, spec.sweep_id), **queue_label(config)}
    retry = []
    if attempts.retries:
        retry = [
            batch_v1.LifecyclePolicy(
                action=batch_v1.LifecyclePolicy.Action.RETRY_TASK,
                action_condition=batch_v1.LifecyclePolicy.ActionCondition(
                    exit_codes=list(RETRIED_EXIT_CODES)
                ),
            )
        ]
    task = batch_v1.TaskSpec(
        runnables=[batch_v1.Runnable(script=batch_v1.Runnable.Script(text=startup_script))],
        max_run_duration={"seconds": attempts.attempt_seconds},
        max_retry_count=attempts.retries,
        lifecycle_policies=retry,
        environment=batch_v1.Environment(variables={RETRIES_VARIABLE: str(attempts.retries)}),
    )
    policy = batch_v1.AllocationPolicy.InstancePolicy(
        machine_type=config.machine_type,
        provisioning_model=(
            batch_v1.AllocationPolicy.ProvisioningModel.SPOT
            if spec.spot
            else batch_v1.AllocationPolicy.ProvisioningModel.STANDARD
        ),
        accelerators=[
            batch_v1.AllocationPolicy.Accelerator(
                type_=config.accelerator_type, count=config.accelerator_count
            )
        ],
        boot_disk=batch_v1.AllocationPolicy.Disk(
            image=f"projects/{config.image_project}/global/images/family/{config.image_family}",
            # The size launch priced: a larger image fails the job instead of billing more.
            size_gb=disk_gb,
            type_=BOOT_DISK_TYPE,
        ),
    )
    allocation = batch_v1.AllocationPolicy(
        location=batch_v1.AllocationPolicy.LocationPolicy(
            allowed_locations=[f"zones/{zone}" for zone in allowed_zones(config)]
        ),
        instances=[
            batch_v1.AllocationPolicy.InstancePolicyOrTemplate(
                policy=policy, install_gpu_drivers=True
            )
        ],
        labels=labels,
    )
    if vm_may_delete_itself(config):
        # The dedicated account of `bench setup`; unset, Batch uses the project's Compute
        # Engine default service account.
        allocation.service_account = batch_v1.ServiceAccount(email=config.service_account)
    return batch_v1.Job(
        task_groups=[batch_v1.TaskGroup(task_count=1, parallelism=1, task_spec=task)],
        allocation_policy=allocation,
        labels=labels,
        logs_policy=batch_v1.LogsPolicy(destination=batch_v1.LogsPolicy.Destination.CLOUD_LOGGING),
    )
