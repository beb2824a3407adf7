"""GceBackend: the Backend protocol on Compute Engine.

start = zone failover over `build_instance` + insert. When its run ends, a VM with the
dedicated service account (`bench setup`) deletes itself; any other VM powers itself off
and stays TERMINATED, its disk billing, until `release` (the end of `launch --wait`,
`fetch`) or `stop` (stop-all) deletes it. max_run_duration does not: a stop clears it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backends.base import (
    BackendHost,
    Capabilities,
    Check,
    Machine,
    Placement,
    SetupStep,
)
from orchestrator.backends.gce.adaptor import message_to_json
from orchestrator.backends.gce.builder import (
    MANAGED_LABEL,
    OWNER_LABEL,
    RUN_LABEL,
    build_instance,
    label_filter,
    managed_filter,
    vm_may_delete_itself,
)
from orchestrator.backends.gce.compute import PARALLEL_CALLS, ComputeApi
from orchestrator.backends.gce.failover import place
from orchestrator.backends.gce.pricing import ComputeEnginePricing
from orchestrator.backends.gce.script_vars import template_vars
from orchestrator.backends.gce.signing import grant_run_access
from orchestrator.config import region_of
from orchestrator.errors import BenchError, CloudError, UsageError

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Instance, Operation

    from orchestrator.config import BenchConfig
    from orchestrator.spec import RunSpec
    from orchestrator.stores.gcs import GcsStore

log = logging.getLogger(__name__)

# Instance status -> the protocol's states. PROVISIONING/STAGING count as RUNNING: the run
# has begun as far as the user (and the bill) is concerned.
_STATES = {
    "PROVISIONING": "RUNNING",
    "STAGING": "RUNNING",
    "RUNNING": "RUNNING",
    "REPAIRING": "RUNNING",
    "STOPPING": "STOPPING",
    "SUSPENDING": "STOPPING",
    "SUSPENDED": "TERMINATED",
    "STOPPED": "TERMINATED",
    "TERMINATED": "TERMINATED",
}
_FINAL_STATES = {"TERMINATED", "PREEMPTED", "GONE"}
# What a powered-off instance's status reads (its disk still bills).
_POWERED_OFF = ("TERMINATED", "STOPPED", "SUSPENDED")


class GceBackend(ComputeEnginePricing):
    name = "gce"
    capabilities = Capabilities(
        title="GCE",
        machine_noun="VM",
        target_phrase="the gce target",
        billed=True,
        machine_from_catalog=True,
        always_has_gpu=True,
        sets_up_python=True,  # the image's python, or a venv at the payload's exact pins
        keeps_files_here=False,
        release_after_run=True,  # a VM that may not delete itself powers off, disk billing
        script_partial="gce",
        phase_model="gce",
        phase_model_by_accelerator=True,
        poll_seconds=10.0,  # a look costs API calls; the heartbeat moves every few seconds
        heartbeat_seconds=20,
        # GCE serves the serial console only while the VM runs: ≈ $0.01 at the spot L4 rate.
        reason_window_seconds=180,
        manifest_grace_seconds=60.0,
        log_outlives_machine=False,
        confines_kernels=True,  # the VM's startup script runs as root
    )

    def __init__(
        self,
        config: BenchConfig,
        *,
        api: ComputeApi | None = None,
        poll_seconds: float | None = None,
        store: GcsStore | None = None,
    ) -> None:
        self.config = config
        self.api = api or ComputeApi(config)
        self.poll_seconds = (
            (config.poll_seconds or self.capabilities.poll_seconds)
            if poll_seconds is None
            else poll_seconds
        )
        self.stop_failures: dict[str, str] = {}  # instance name -> why, from the last stop()
        self._boot_disk_gb: int | None = None  # read once: boot_disk_gb()
        self._store = store  # doctor's and setup's bucket; made when first needed

    # -- registration ------------------------------------------------------------------

    @classmethod
    def create(cls, host: BackendHost) -> GceBackend:
        cls.require_settings(host.config)
        return cls(host.config, store=host.store(cls.name))

    @classmethod
    def create_store(cls, host: BackendHost) -> GcsStore:
        from orchestrator.stores.gcs import GcsStore

        cls.require_settings(host.config)
        return GcsStore(host.config)

    @classmethod
    def require_settings(cls, config: BenchConfig) -> None:
        missing = [key for key in ("project", "bucket") if getattr(config, key) is None]
        if missing:
            raise UsageError(
                f"the gce backend needs {' and '.join(missing)}: set "
                f"{'them' if len(missing) > 1 else 'it'} in bench.toml "
                f'(e.g. project = "my-project", bucket = "my-bench-results") or as '
                + " / ".join(f"BENCH_{k.upper()}" for k in missing)
            )

    @classmethod
    def unsearched_reason(cls, config: BenchConfig) -> str | None:
        return None if config.project else "no project configured"

    @classmethod
    def chosen_by_auto(cls, config: BenchConfig) -> str | None:
        return f"GCP project {config.project} is configured" if config.project else None

    @property
    def store(self) -> GcsStore:
        if self._store is None:
            from orchestrator.stores.gcs import GcsStore

            self._store = GcsStore(self.config)
        return self._store

    def template_vars(self) -> dict:
        return template_vars(self.config)

    def run_access_vars(self, spec: RunSpec) -> dict:
        return grant_run_access(
            self.config, self.store, spec.run_prefix, spec.max_run_seconds
        ).template_vars()

    def work_dir(self, run_id: str) -> str:
        return f"{self.config.vm_work_dir}/{run_id}"

    # -- start -------------------------------------------------------------------------

    def start(self, spec: RunSpec, startup_script: str, shutdown_script: str) -> Placement:
        """Failover over the configured zones. An on-demand retry is the launch service's
        call: it re-plans the time cap and re-renders the scripts at the higher rate."""

        disk_gb = self.boot_disk_gb()

        def build(zone: str, spot: bool) -> Instance:
            return build_instance(
                spec, self.config, zone, startup_script, shutdown_script, spot, disk_gb
            )

        # Build once before any request: a bad name or label fails here, costing nothing.
        build(self.config.zones[0], spec.spot)
        self.check_before_insert(spec.spot)
        landed = place(
            self.config.zones,
            build,
            self.api.insert,
            spot=spec.spot,
            suggest_on_demand=spec.spot and not self.config.on_demand_fallback,
        )
        return Placement(
            location=landed.zone,
            handle=spec.instance_name,
            attempts=landed.attempts,
            spot=landed.spot,
        )

    def refuse_leftovers(self) -> None:
        """A VM that may not delete itself powers off at its end, TERMINATED with its disk
        billing (max_run_duration no longer applies to a stopped VM): refused unless the
        user accepted that (`allow_leftover_disk`)."""
        if vm_may_delete_itself(self.config) or self.config.allow_leftover_disk:
            return
        raise UsageError(
            "the VM would run as the project's default service account, which may not delete "
            "it: at its end it would power off and its boot disk would bill until `bench "
            "fetch`, the end of --wait or `bench stop-all` deleted it. Run `bench setup "
            "--apply` and set the service_account it names (its VMs delete themselves), or "
            "accept that with --allow-leftover-disk. Nothing was created"
        )

    def leftover_note(
        self, run_id: str, disk_usd_per_hour: float, disk_gb: int, cap_seconds: int, most_usd: float
    ) -> str | None:
        """What a VM left behind can bill: a self-deleting VM whose delete fails runs on until
        GCE deletes it at its cap (`most_usd`, the launch's worst case, holds it); an accepted
        leftover disk, per hour, until it is deleted."""
        if vm_may_delete_itself(self.config):
            from orchestrator.text import format_duration

            return (
                "should this VM fail to delete itself, it runs on until GCE deletes it, boot "
                f"disk included, at its {format_duration(cap_seconds)} cap: nothing bills past "
                f"${most_usd:.2f} (the worst case); `bench stop-all` deletes it sooner"
            )
        return (
            f"--allow-leftover-disk: this VM cannot delete itself (default service account): "
            f"when its run ends it powers off and its {disk_gb} GB boot disk bills "
            f"${disk_usd_per_hour:.4f}/h until `bench fetch {run_id}`, the end of --wait, your "
            "next `bench launch` or `bench stop-all` deletes it (`bench setup --apply`: VMs "
            "that delete themselves)"
        )

    def boot_disk_gb(self) -> int:
        """The boot disk's size as the insert asks for it, and as launch prices it:
        `disk_gb`, else the diskSizeGb of the image the family resolves to now (read once;
        CloudError when the family has no usable image, before anything is created)."""
        if self._boot_disk_gb is None:
            self._boot_disk_gb = self.config.disk_gb or self._image_disk_gb()
        return self._boot_disk_gb

    def _image_disk_gb(self) -> int:
        from orchestrator.backends.gce.project_resources import ProjectResources
        from orchestrator.backends.gce.readiness import image_check

        config = self.config
        resolved, family_images = ProjectResources(self.api).image_state(
            config.image_project, config.image_family
        )
        check = image_check(config.image_project, config.image_family, resolved, family_images)
        if not check.ok:
            raise _not_ready(check)
        return int(resolved["diskSizeGb"])

    def check_before_insert(self, spot: bool) -> None:
        """The cheap part of `bench doctor`, before any VM exists: the image family resolves
        to a supported image, and some configured region has GPU quota for this launch."""
        from orchestrator.backends.gce.project_resources import ProjectResources
        from orchestrator.backends.gce.readiness import (
            image_check,
            quotas_of,
            region_quota_check,
            shapes_for,
        )
        from orchestrator.config import regions_of

        resources = ProjectResources(self.api)
        config = self.config
        image = image_check(
            config.image_project,
            config.image_family,
            *resources.image_state(config.image_project, config.image_family),
        )
        quota = [
            region_quota_check(
                region,
                quotas_of(resources.region(region)),
                shapes_for(config),
                spot,
                not spot or config.on_demand_fallback,
            )
            for region in regions_of(config.zones)
        ]
        failed = [image] if not image.ok else []
        if not any(check.ok for check in quota):
            failed += quota
        if failed:
            raise _not_ready(failed[0])

    def instance_request_json(
        self, spec: RunSpec, startup_script: str, shutdown_script: str, zone: str | None = None
    ) -> str:
        """The insert body `start` would send to `zone` (the first it tries), as JSON.

        Serialized as the REST transport does (no empty defaults), except that the scripts,
        which `bench render` prints in full anyway, are replaced by their size.
        """
        zone = zone or self.config.zones[0]
        # The disk size launch read from the image, where it did: `bench render` sends nothing.
        instance = build_instance(
            spec, self.config, zone, startup_script, shutdown_script, spec.spot, self._boot_disk_gb
        )
        shown = {
            "startup-script": "the startup script `bench render` prints",
            "shutdown-script": "the script `bench render --shutdown` prints",
        }
        for item in instance.metadata.items:
            if item.key in shown:
                item.value = f"<{len(item.value.encode())} bytes: {shown[item.key]}>"
        return message_to_json(instance)

    # -- state and logs ----------------------------------------------------------------

    def machine_state(self, run_id: str, placement: Placement) -> str:
        instance = self.api.get(placement.location, placement.handle)
        if instance is None:
            return "GONE"
        return _STATES.get(instance.status, "RUNNING")

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]:
        """Serial port 1 line by line; with follow, until the instance stops or is gone."""
        zone, name = placement.location, placement.handle
        position, partial, draining = 0, "", False
        while True:
            # None: the instance is gone, or its serial port cannot be read right now.
            output = self.api.serial_output(zone, name, position)
            new_output = False
            if output is not None:
                if output.start > position:
                    # The serial buffer is bounded; GCE says where it really started.
                    yield f"[bench: {output.start - position} bytes of serial output were lost]"
                lines = (partial + output.contents).replace("\r\n", "\n").split("\n")
                partial = lines.pop()
                yield from lines
                new_output = output.next_ > position
                position = output.next_
            if not follow or draining:
                break
            if not new_output:
                if self.machine_state(run_id, placement) in _FINAL_STATES:
                    draining = True  # one more read: lines written just before it stopped
                    continue
                time.sleep(self.poll_seconds)
        if partial:
            yield partial

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        """Serial output from byte `offset`, and where the next read starts."""
        output = self.api.serial_output(placement.location, placement.handle, offset)
        if output is None:
            return "", offset
        return output.contents, output.next_

    # -- release and stop-all ----------------------------------------------------------

    def release(self, run_id: str, placement: Placement) -> bool:
        """Delete the run's instance (and, by auto_delete, its disk); False when it was gone
        already (it deleted itself), and then no delete is sent."""
        if placement.location and placement.handle:
            if self.api.get(placement.location, placement.handle) is None:
                return False
            return self.api.delete(placement.location, placement.handle)
        deleted = False
        for zone, instance in self.api.list_instances(label_filter(RUN_LABEL, run_id)):
            deleted = self.api.delete(zone, instance.name) or deleted
        return deleted

    def list_machines(self) -> list[Machine]:
        """Every instance labelled bench-managed=true, in every zone of the project."""
        from orchestrator.backends.gce.pricing import load_catalog

        machines, catalog = [], load_catalog()
        for zone, instance in self.api.list_instances(managed_filter()):
            labels = dict(instance.labels)
            if labels.get(MANAGED_LABEL) != "true":
                continue  # the server filtered already; never delete what is not ours
            machines.append(
                Machine(
                    run_id=labels.get(RUN_LABEL, ""),
                    name=instance.name,
                    location=zone,
                    state=instance.status,
                    rate_usd_per_hour=self._rate(zone, instance, catalog),
                    owner=labels.get(OWNER_LABEL, ""),
                )
            )
        return machines

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """Delete all in parallel: send every delete first, then wait for every operation.

        Returns those now gone; `stop_failures` says why the others are not.
        """
        self.stop_failures = {}
        if not machines:
            return []
        with ThreadPoolExecutor(max_workers=min(PARALLEL_CALLS, len(machines))) as pool:
            started = list(pool.map(self._start_delete, machines))
            finished = list(pool.map(self._finish_delete, machines, started))
        return [machine for machine, gone in zip(machines, finished, strict=False) if gone]

    def _start_delete(self, machine: Machine) -> tuple[bool, Operation | None]:
        try:
            return True, self.api.start_delete(machine.location, machine.name)
        except BenchError as e:
            self._stop_failed(machine, e)
            return False, None

    def _finish_delete(self, machine: Machine, started: tuple[bool, Operation | None]) -> bool:
        sent, operation = started
        if not sent:
            return False
        try:
            self.api.finish(machine.location, operation)
        except BenchError as e:
            self._stop_failed(machine, e)
            return False
        return True

    def _stop_failed(self, machine: Machine, error: BenchError) -> None:
        self.stop_failures[machine.name] = str(error)
        log.warning("could not delete %s in %s: %s", machine.name, machine.location, error)

    def powered_off(self) -> list[Machine]:
        """Every powered-off bench VM in the project: no VM charge, but its disk bills."""
        return [m for m in self.list_machines() if m.state in _POWERED_OFF]

    def delete_command(self, machine: Machine) -> str:
        return (
            f"gcloud compute instances delete {machine.name} "
            f"--zone {machine.location} --project {self.config.project} --quiet"
        )

    def local_files(self, run_id: str, run_key: str) -> list[Path]:
        return []  # everything of a gce run is in the bucket or on its VM

    # -- doctor and setup --------------------------------------------------------------

    @classmethod
    def doctor_preflight(cls, config: BenchConfig) -> list[Check]:
        from orchestrator.backends.gce.doctor import preflight_checks

        return preflight_checks(config)

    @classmethod
    def doctor_checklist(cls) -> tuple[str, ...]:
        from orchestrator.backends.gce.doctor import CHECKLIST

        return CHECKLIST

    def doctor_checks(self, gpu_keys: list[str] | None, probe: bool) -> Iterator[Check]:
        from orchestrator.backends.gce.doctor import run_checks

        return run_checks(self.config, self.api, self.store, gpu_keys, probe, self.poll_seconds)

    def setup_steps(self, launchers: Sequence[str] = ()) -> list[SetupStep]:
        from orchestrator.backends.gce.setup import launchers_for, setup_steps_for

        return setup_steps_for(self.config, launchers_for(launchers))

    def apply_setup(
        self,
        steps: list[SetupStep],
        on_done: Callable[[SetupStep, str], None],
        on_wait: Callable[[SetupStep, float], None],
    ) -> None:
        from orchestrator.backends.gce.setup import apply_setup

        apply_setup(self.config, self.store, steps, on_done, on_wait)

    def setup_followups(self, launchers: Sequence[str] = ()) -> list[str]:
        from orchestrator.backends.gce.setup import launchers_for, setup_followups

        return setup_followups(self.config, launchers_for(launchers))

    def _rate(self, zone: str, instance: Instance, catalog: dict) -> float:
        """What this instance bills per hour now, priced from what it is (it may come from
        another config or region): a powered-off one only its disk; 0 when not priced."""
        from orchestrator.backends.gce.pricing import machine_rate, priced_disk_gb

        accelerators = list(instance.guest_accelerators)
        boot_disks = [d for d in instance.disks if d.boot]
        disk_gb = next(
            (d.disk_size_gb or d.initialize_params.disk_size_gb for d in boot_disks), None
        ) or priced_disk_gb(self.config.disk_gb, catalog)
        try:
            rate = machine_rate(
                region=region_of(zone),
                machine_type=_last_segment(instance.machine_type) or self.config.machine_type,
                accelerator_type=(
                    _last_segment(accelerators[0].accelerator_type)
                    if accelerators
                    else self.config.accelerator_type
                ),
                accelerator_count=sum(a.accelerator_count for a in accelerators),
                disk_gb=disk_gb,
                spot=instance.scheduling.provisioning_model == "SPOT",
                catalog=catalog,
            )
        except BenchError:
            return 0.0  # not priced: stop-all still deletes it
        return rate.disk if _STATES.get(instance.status) == "TERMINATED" else rate.total


def _not_ready(check) -> CloudError:
    """A failed readiness check before any insert, as the one line a launch ends with."""
    return CloudError(
        f"{check.name}: {check.detail}; {check.fix}. No VM was created; "
        "`bench doctor` checks the whole project"
    )


def _last_segment(url: str) -> str:
    """`.../zones/us-central1-a/machineTypes/g2-standard-4` -> `g2-standard-4`."""
    return url.rsplit("/", 1)[-1]
