"""The VM of `bench doctor --probe` (pure): the cheapest machine, no GPU, spot, a cloud-side
time cap, running as the VM account; its startup script writes one object under its run's
key and deletes itself (startup_templates/probe.sh.j2).

It is named and labelled as a run's VM (bench-<run id>, bench-managed), so the
self-delete condition applies to it exactly as to a run's, and `bench stop-all` finds it
should anything leave it behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.backends.gce.adaptor import compute_v1
from orchestrator.backends.gce.builder import run_labels, vm_scopes
from orchestrator.backends.gce.script_vars import template_vars
from orchestrator.backends.gce.signing import grant_run_access

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Instance

    from orchestrator.config import BenchConfig

# e2-micro: 2 shared vCPUs, 1 GB, no GPU, the smallest general-purpose shape
# (https://cloud.google.com/compute/docs/general-purpose-machines#e2-shared-core); spot, a
# fraction of a cent for the few minutes it lives.
PROBE_MACHINE_TYPE = "e2-micro"
# A small public image with curl and bash (https://cloud.google.com/compute/docs/images/
# os-details); the disk is the image's size (10 GB).
PROBE_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
# The cloud deletes it after this long if it cannot delete itself (30 s is GCE's minimum:
# https://cloud.google.com/compute/docs/instances/limit-vm-runtime#limitations).
PROBE_MAX_RUN_SECONDS = 600
PROBE_OBJECT = "probe.txt"


@dataclass(frozen=True)
class ProbeRun:
    """Names of one probe: a run id, as a run has."""

    run_id: str

    @property
    def instance_name(self) -> str:
        from results_schema.names import instance_name

        return instance_name(self.run_id)

    @property
    def run_key(self) -> str:
        from results_schema.names import run_key

        return run_key(self.run_id)

    @property
    def object_key(self) -> str:
        return f"{self.run_key}/{PROBE_OBJECT}"


def new_probe_run() -> ProbeRun:
    from results_schema.names import new_run_id

    return ProbeRun(new_run_id())


def render_probe_script(config: BenchConfig, probe: ProbeRun, store) -> str:
    """The probe's script, holding an upload grant for its own key as a run's does."""
    from orchestrator.render import template_environment

    access = grant_run_access(config, store, probe.run_key, PROBE_MAX_RUN_SECONDS)
    template = template_environment().get_template("probe.sh.j2")
    return template.render(
        {
            **template_vars(config),
            **access.template_vars(),
            "self_delete": True,
            "run_key": probe.run_key,
            "probe_key": probe.object_key,
        }
    )


def build_probe_instance(
    config: BenchConfig, zone: str, probe: ProbeRun, script: str, owner: str
) -> Instance:
    labels = run_labels(probe.run_id, owner)
    return compute_v1.Instance(
        name=probe.instance_name,
        machine_type=f"zones/{zone}/machineTypes/{PROBE_MACHINE_TYPE}",
        scheduling=compute_v1.Scheduling(
            provisioning_model="SPOT",
            instance_termination_action="DELETE",
            max_run_duration=compute_v1.Duration(seconds=PROBE_MAX_RUN_SECONDS),
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
        ),
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                type_="PERSISTENT",
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=PROBE_IMAGE, labels=labels
                ),
            )
        ],
        # An external address: the default network's subnets need not have Private Google
        # Access, and the probe must reach Cloud Storage and Compute as a run's VM does.
        network_interfaces=[
            compute_v1.NetworkInterface(
                network="global/networks/default",
                access_configs=[
                    compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")
                ],
            )
        ],
        labels=labels,
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key="startup-script", value=script)]),
        service_accounts=[
            compute_v1.ServiceAccount(email=config.service_account, scopes=vm_scopes(config))
        ],
    )
