"""Pure builder: RunSpec -> batch_v1.Job, one task running bench's startup script.

Field by field (https://cloud.google.com/batch/docs/reference/rest/v1/projects.locations.jobs):
one task group ("Only one TaskGroup is supported now") of one task; the machine shape, the
accelerator, spot provisioning, installGpuDrivers and the boot image are the instance policy;
allowedLocations are the configured zones of the job's region; labels go on the job and,
through allocationPolicy.labels, on the VMs; the VMs' account is named, with its scopes.
Nothing here talks to the network.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from orchestrator.backends.batch.adaptor import batch_v1
from orchestrator.backends.batch.iam import job_account
from orchestrator.backends.batch.money import AttemptPlan
from orchestrator.backends.gce.builder import STORAGE_SCOPE, _require_name, run_labels
from orchestrator.config import region_of
from orchestrator.errors import ConfigError, UsageError

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
# The scopes the job names for its VM's account: the storage-only one a gce VM of the default
# account gets (its token reads the build cache; a run's own objects go through its signed
# grants). They narrow nothing on Batch: the VM gets "the cloud-platform API scope that will
# be added by default" beside them (ServiceAccount.scopes in the client libraries' reference,
# https://cloud.google.com/dotnet/docs/reference/Google.Cloud.Batch.V1/2.7.0/Google.Cloud.Batch.V1.ServiceAccount;
# the batch v1 discovery document's text, "List of scopes to be enabled for this service
# account", no longer says which are added, so bench takes the wider reading). A Batch VM can
# therefore use every role its account holds: Batch runs as bench's own account alone, whose
# roles `bench doctor` checks are bench's and no others (doctor.py), never as the project's
# default account (Editor on most projects).
JOB_SCOPES = (STORAGE_SCOPE,)
ADDED_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The boot image is the configured one, a Deep Learning VM family with the NVIDIA driver in
# it (DEFAULT_IMAGE_FAMILY: ...-nvidia-580), as on gce; so Batch is not asked to install a
# driver. installGpuDrivers "fetch[es] drivers from a third party location and install[s]
# them" by GoogleCloudPlatform/compute-gpu-installation's install_gpu_driver.py, "Default is
# false" (InstancePolicyOrTemplate.installGpuDrivers, batch v1 discovery document); the
# page on GPU jobs leaves it off where the image brings its driver
# (https://cloud.google.com/batch/docs/create-run-job-gpus). Asked on an image that has one,
# what it does is not documented, and it adds an unbounded install before the task starts.
INSTALL_GPU_DRIVERS = False


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


def job_service_account(config: BenchConfig) -> batch_v1.ServiceAccount:
    """The job's VM account, named with its scopes; ConfigError with the default account,
    which Batch would give the cloud-platform scope with the project's broad roles."""
    account = job_account(config)
    if account is None:
        raise ConfigError(
            "the batch backend runs its VMs as bench's own service account only: Batch gives "
            "a job's VM the cloud-platform scope, so with the project's default account "
            '(service_account = "default", Editor on most projects) a run\'s code could '
            "reach the whole project. Run `bench setup --apply` and set service_account to "
            "the account it creates (bench-vm@PROJECT.iam.gserviceaccount.com). Nothing "
            "was created"
        )
    return batch_v1.ServiceAccount(email=account, scopes=list(JOB_SCOPES))


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
                policy=policy, install_gpu_drivers=INSTALL_GPU_DRIVERS
            )
        ],
        labels=labels,
        service_account=job_service_account(config),
    )
    return batch_v1.Job(
        task_groups=[batch_v1.TaskGroup(task_count=1, parallelism=1, task_spec=task)],
        allocation_policy=allocation,
        labels=labels,
        logs_policy=batch_v1.LogsPolicy(destination=batch_v1.LogsPolicy.Destination.CLOUD_LOGGING),
    )
