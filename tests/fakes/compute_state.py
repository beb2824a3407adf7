"""The stand-in's model of Compute Engine: instances, their lifecycle and their fake VMs.

All state lives under one lock; a ticker thread advances time-based transitions:
PROVISIONING -> STAGING -> RUNNING (the sandbox starts) -> STOPPING (SIGTERM, grace,
SIGKILL) -> TERMINATED, or removed when the instance is being deleted. Scheduled events
(maxRunDuration, preemption at T, the `shutdown -h +N` watchdog) are in simulated seconds:
`time_scale` simulated seconds pass per real second. `billed_seconds` says what an instance
bills, in simulated seconds, as Google's billing model counts it.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gce_errors
from .compute_catalog import GLOBAL_GPU_QUOTA, FakeCatalog, region_of
from .faults import FaultPlan
from .gce_errors import GceError
from .insert_rules import check_insert, gpu_quota_metric, gpus_of, quota_failure
from .internal_dns import address_for
from .operations import API_ROOT, Operation, rfc3339_now
from .vm_sandbox import VmSandbox

# Machine types that are not offered on-demand (gpus.toml in bench says why).
SPOT_OR_FLEX_ONLY = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g")

_instance_ids = itertools.count(4_000_000_000_000_000_001)
# Limit the run time of a VM, Restrictions: the automatic termination can start up to 30 s
# after the duration or time given
# (https://cloud.google.com/compute/docs/instances/limit-vm-runtime, Restrictions).
MAX_RUN_LATENESS_LIMIT_S = 30.0
# The machine (vCPUs, memory, GPUs) bills from RUNNING until TERMINATED: "charged a minimum
# of 1 minute", then "in 1 second increments"
# (https://cloud.google.com/compute/vm-instance-pricing#billing_model). STOPPING counts as
# billed, the stricter reading bench's budget takes too (a delete's shutdown bills). The
# boot disk and the external address bill while the instance exists.
MACHINE_BILLED_STATES = ("RUNNING", "STOPPING")
BILLING_MINIMUM_S = 60


@dataclass
class FakeComputeConfig:
    """Timings are real seconds unless named `sim`; defaults keep tests fast."""

    provisioning_s: float = 0.05
    staging_s: float = 0.05
    stopping_s: float = 0.05
    shutdown_grace_s: float = 1.0  # stop/delete/guest power-off: SIGTERM -> SIGKILL
    preemption_grace_s: float = 1.0  # 30 s on real spot VMs
    time_scale: float = 1.0  # simulated seconds per real second
    # zoneOperations.wait holds a call up to GCE's 2 minutes in simulated time, and never
    # longer than operation_wait_s real seconds (which keeps time_scale=1 tests fast).
    operation_wait_s: float = 2.0
    operation_wait_sim_s: float = 120.0
    # How late maxRunDuration's termination starts, in simulated seconds: 0 keeps tests
    # fast; Google allows itself up to MAX_RUN_LATENESS_LIMIT_S.
    max_run_lateness_sim_s: float = 0.0
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
    run_scripts: bool = True  # False: instances boot without running startup-script
    vm_env: dict[str, str] = field(default_factory=dict)  # extra env for the VM scripts
    vm_path: list[str] = field(default_factory=list)  # dirs put first on the VM's PATH

    @property
    def wait_hold_s(self) -> float:
        """Real seconds zoneOperations.wait holds a call that is not DONE."""
        return min(self.operation_wait_s, self.operation_wait_sim_s / self.time_scale)

    def __setattr__(self, name: str, value: Any) -> None:
        # A lateness Google does not document is the test's mistake: refused where it is set.
        if name == "max_run_lateness_sim_s" and not 0 <= value <= MAX_RUN_LATENESS_LIMIT_S:
            raise ValueError(f"maxRunDuration lateness {value} s: Google says 0 to 30 s")
        super().__setattr__(name, value)


@dataclass(frozen=True)
class BilledSeconds:
    """What one instance bills, in simulated seconds, by Google's billing model."""

    machine: int  # vCPUs, memory and GPUs: RUNNING and STOPPING, a 1-minute minimum
    attached: int  # the boot disk and the external address: while the instance exists


def project_number(project: str) -> int:
    return 100_000_000_000 + zlib.crc32(project.encode()) % 900_000_000_000


def _url_for(project: str, value: str) -> str:
    if value.startswith(("https://", "http://")):
        return value
    if value.startswith("projects/"):
        return f"{API_ROOT}/{value}"
    return f"{API_ROOT}/projects/{project}/{value}"


@dataclass
class FakeInstance:
    """One instance. `sent` is exactly the JSON the client inserted."""

    project: str
    zone: str
    name: str
    sent: dict[str, Any]
    id: str = field(default_factory=lambda: str(next(_instance_ids)))
    status: str = "PROVISIONING"
    status_since: float = field(default_factory=time.monotonic)
    status_history: list[str] = field(default_factory=lambda: ["PROVISIONING"])
    created: str = field(default_factory=rfc3339_now)
    created_at: float = field(default_factory=time.monotonic)
    removed_at: float | None = None
    machine_billed_sim_s: float = 0.0  # past spells in MACHINE_BILLED_STATES
    running_since: float | None = None
    # Simulated seconds it had been RUNNING when it began to go down (None: it has not).
    went_down_after_sim_s: float | None = None
    preempted: bool = False
    deleted: bool = False
    doomed_by: GceError | None = None  # insert accepted, then fails (operation error)
    going_down_because: str | None = None  # guest | stop | delete | preemption | maxRunDuration
    remove_when_down: bool = False
    preempt_after_sim_s: float | None = None
    poweroff_at: float | None = None  # guest shutdown request, real monotonic time
    sandbox: VmSandbox | None = None
    waiting_ops: dict[str, list[Operation]] = field(default_factory=dict)
    serial: bytearray = field(default_factory=bytearray)
    serial_lock: threading.Lock = field(default_factory=threading.Lock)
    network_ip: str = ""  # its internal address on the default network (internal_dns.py)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"

    @property
    def workdir(self) -> Path | None:
        """The VM script's working directory (kept after deletion until the server stops)."""
        return self.sandbox.workdir if self.sandbox else None

    def metadata_value(self, key: str) -> str | None:
        for item in (self.sent.get("metadata") or {}).get("items") or []:
            if item.get("key") == key:
                return item.get("value", "")
        return None

    def metadata_keys(self) -> list[str]:
        return [i["key"] for i in (self.sent.get("metadata") or {}).get("items") or []]

    @property
    def scheduling(self) -> dict[str, Any]:
        return self.sent.get("scheduling") or {}

    def max_run_sim_s(self) -> float | None:
        duration = self.scheduling.get("maxRunDuration")
        if not duration:
            return None
        return float(duration.get("seconds", 0)) + int(duration.get("nanos", 0)) / 1e9

    @property
    def termination_action(self) -> str:
        return self.scheduling.get("instanceTerminationAction") or "STOP"

    def write_serial(self, text: str) -> None:
        with self.serial_lock:
            self.serial.extend(text.encode())

    def serial_text(self) -> str:
        with self.serial_lock:
            return self.serial.decode("utf-8", "replace")

    def to_json(self) -> dict[str, Any]:
        resource = copy.deepcopy(self.sent)
        resource.update(
            kind="compute#instance",
            id=self.id,
            creationTimestamp=self.created,
            name=self.name,
            status=self.status,
            zone=f"{API_ROOT}/projects/{self.project}/zones/{self.zone}",
            selfLink=f"{API_ROOT}/{self.path}",
            labelFingerprint="42WmSpB8rSM=",
            fingerprint="fake-fingerprint=",
            cpuPlatform="Intel Cascade Lake",
        )
        if "machineType" in resource:
            resource["machineType"] = _url_for(self.project, resource["machineType"])
        for nic in (resource.get("networkInterfaces") or [])[:1]:
            nic["networkIP"] = self.network_ip
        resource.setdefault("metadata", {}).update(
            kind="compute#metadata", fingerprint="fake-md-fingerprint="
        )
        return resource


class FakeCompute:
    """Registry plus lifecycle engine; the HTTP layer in compute_server.py calls into it."""

    def __init__(
        self,
        config: FakeComputeConfig,
        faults: FaultPlan,
        metadata_endpoint_for: Callable[[FakeInstance], str],
        poweroff_url_for: Callable[[FakeInstance], str],
        catalog: FakeCatalog,
        dns_address: str = "",
    ) -> None:
        self._dns_address = dns_address
        self._addresses = itertools.count()
        self.config = config
        self.faults = faults
        self.catalog = catalog
        self._metadata_endpoint_for = metadata_endpoint_for
        self._poweroff_url_for = poweroff_url_for
        self.lock = threading.RLock()
        self.instances: dict[tuple[str, str, str], FakeInstance] = {}
        self.gone: list[FakeInstance] = []  # deleted instances, kept for inspection
        self.operations: dict[str, Operation] = {}
        self.request_ids: dict[str, Operation] = {}
        self._sandbox_root = Path(tempfile.mkdtemp(prefix="fake-gce-"))
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, daemon=True)
        self._ticker.start()

    # -- API-level actions (called with arguments already parsed) ------------------------

    def _new_op(self, inst: FakeInstance, op_type: str) -> Operation:
        op = Operation(inst.project, inst.zone, op_type, inst.name, inst.id)
        self.operations[op.name] = op
        return op

    def get(self, project: str, zone: str, name: str) -> FakeInstance:
        inst = self.instances.get((project, zone, name))
        if inst is None:
            raise gce_errors.not_found(f"projects/{project}/zones/{zone}/instances/{name}")
        return inst

    def insert(
        self, project: str, zone: str, body: dict[str, Any], request_id: str | None = None
    ) -> Operation:
        """Accept the insert; the operation is DONE once the VM runs (or its failure is known).

        "If you make the request again with the same request ID, the server can check if
        original operation with the same request ID was received, and if so, will ignore the
        second request" (requestId in
        https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert).
        """
        with self.lock:
            if request_id and request_id in self.request_ids:
                return self.request_ids[request_id]
            op = self._insert(project, zone, body)
            if request_id:
                self.request_ids[request_id] = op
            return op

    def _insert(self, project: str, zone: str, body: dict[str, Any]) -> Operation:
        name = body.get("name") or ""
        if not name:
            raise gce_errors.invalid("Invalid value for field 'resource.name': ''.")
        machine_type = (body.get("machineType") or "").rsplit("/", 1)[-1]
        if not machine_type:
            raise gce_errors.invalid("Invalid value for field 'resource.machineType': ''.")
        model = (body.get("scheduling") or {}).get("provisioningModel") or "STANDARD"
        spot = model == "SPOT"
        if machine_type in SPOT_OR_FLEX_ONLY and model not in ("SPOT", "FLEX_START"):
            # A3 High with fewer than 8 GPUs: Spot or Flex-start only
            # (https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-high-vms).
            raise gce_errors.invalid(
                f"Invalid value for field 'resource.scheduling.provisioningModel': '{model}'. "
                f"Machine type {machine_type} supports only SPOT or FLEX_START."
            )
        check_insert(self.catalog, project, zone, body)
        failure = self.faults.insert_failure(project, zone, machine_type, spot)
        if failure is not None and failure[1] == "http":
            raise failure[0]
        with self.lock:
            if (project, zone, name) in self.instances:
                raise gce_errors.already_exists(f"projects/{project}/zones/{zone}/instances/{name}")
            inst = FakeInstance(project, zone, name, copy.deepcopy(body))
            inst.network_ip = address_for(next(self._addresses))
            over_quota = quota_failure(
                self.catalog,
                zone,
                body,
                self.gpu_usage(project, region_of(zone)),
                self.gpu_usage(project, None),
            )
            if failure is not None or over_quota is not None:
                inst.doomed_by = failure[0] if failure is not None else over_quota
            self.instances[(project, zone, name)] = inst
            op = self._new_op(inst, "insert")
            inst.waiting_ops.setdefault("RUNNING", []).append(op)
            return op

    def delete(self, project: str, zone: str, name: str) -> Operation:
        with self.lock:
            inst = self.get(project, zone, name)
            op = self._new_op(inst, "delete")
            inst.waiting_ops.setdefault("REMOVED", []).append(op)
            inst.remove_when_down = True
            if inst.status not in ("STOPPING", "TERMINATED"):
                self._begin_power_off(inst, "delete", self.config.shutdown_grace_s)
            return op

    def stop(self, project: str, zone: str, name: str) -> Operation:
        with self.lock:
            inst = self.get(project, zone, name)
            op = self._new_op(inst, "stop")
            if inst.status == "TERMINATED":
                op.finish()
            else:
                inst.waiting_ops.setdefault("TERMINATED", []).append(op)
                if inst.status != "STOPPING":
                    self._begin_power_off(inst, "stop", self.config.shutdown_grace_s)
            return op

    def start(self, project: str, zone: str, name: str) -> Operation:
        with self.lock:
            inst = self.get(project, zone, name)
            op = self._new_op(inst, "start")
            if inst.status == "TERMINATED":
                inst.going_down_because = None
                inst.preempted = False
                self._set_status(inst, "STAGING")
                inst.waiting_ops.setdefault("RUNNING", []).append(op)
            elif inst.status in ("RUNNING", "STAGING", "PROVISIONING"):
                op.finish()
            else:
                raise gce_errors.invalid(f"The resource '{inst.path}' is not ready")
            return op

    def gpu_usage(self, project: str, region: str | None) -> dict[str, float]:
        """GPUs the project's instances hold now, per quota metric: in `region`, or across
        all regions (GPUS_ALL_REGIONS) when None. A TERMINATED VM holds none
        (https://cloud.google.com/compute/resource-usage)."""
        usage: dict[str, float] = {}
        with self.lock:
            for inst in self.instances.values():
                gpus = gpus_of(inst.sent)
                if gpus is None or inst.project != project or inst.doomed_by is not None:
                    continue
                if inst.status == "TERMINATED":
                    continue
                if region is None:
                    usage[GLOBAL_GPU_QUOTA] = usage.get(GLOBAL_GPU_QUOTA, 0.0) + gpus[1]
                elif region_of(inst.zone) == region:
                    spot = inst.scheduling.get("provisioningModel") == "SPOT"
                    metric = gpu_quota_metric(self.catalog, inst.zone, gpus[0], spot)
                    usage[metric] = usage.get(metric, 0.0) + gpus[1]
        return usage

    def operation(self, project: str, zone: str, name: str) -> Operation:
        op = self.operations.get(name)
        if op is None or op.project != project or op.zone != zone:
            raise gce_errors.not_found(f"projects/{project}/zones/{zone}/operations/{name}")
        return op

    # -- events from tests and from the guest --------------------------------------------

    def preempt(self, zone: str, name: str, after_sim_s: float | None, project: str) -> None:
        with self.lock:
            inst = self.get(project, zone, name)
            if after_sim_s is None and inst.status == "RUNNING":
                self._begin_power_off(inst, "preemption", self.config.preemption_grace_s)
            else:
                inst.preempt_after_sim_s = after_sim_s or 0.0

    def guest_shutdown(self, project: str, zone: str, name: str, args: list[str]) -> None:
        """`shutdown ARGS` ran in the guest: now, +N minutes, or -c to cancel."""
        with self.lock:
            inst = self.get(project, zone, name)
            if "-c" in args:
                inst.poweroff_at = None
                return
            when = next((a for a in args if a == "now" or a.startswith("+")), "+1")
            minutes = 0.0 if when == "now" else float(when[1:])
            # "now" still lets the shim's curl return before the machine goes down.
            delay = 0.05 if minutes == 0 else minutes * 60 / self.config.time_scale
            inst.poweroff_at = time.monotonic() + delay
            inst.write_serial(f"{name} fake-vm: shutdown {' '.join(args)}\n")

    # -- lifecycle -----------------------------------------------------------------------

    def _set_status(self, inst: FakeInstance, status: str) -> None:
        now = time.monotonic()
        if inst.status in MACHINE_BILLED_STATES:
            inst.machine_billed_sim_s += (now - inst.status_since) * self.config.time_scale
        inst.status = status
        inst.status_since = now
        inst.status_history.append(status)
        for op in inst.waiting_ops.pop(status, []):
            op.finish()

    def _begin_power_off(self, inst: FakeInstance, because: str, grace_s: float) -> None:
        inst.going_down_because = because
        inst.went_down_after_sim_s = self._sim_running_s(inst, time.monotonic())
        if because == "preemption":
            inst.preempted = True  # visible in metadata before SIGTERM arrives
        if because in ("preemption", "maxRunDuration") and inst.termination_action == "DELETE":
            inst.remove_when_down = True
        self._set_status(inst, "STOPPING")
        if inst.sandbox is not None:
            script = inst.metadata_value("shutdown-script") if self.config.run_scripts else None
            inst.sandbox.power_off(grace_s, script)

    def _boot(self, inst: FakeInstance) -> None:
        inst.running_since = time.monotonic()
        if inst.sandbox is None:
            env = dict(os.environ)
            env.update(self.config.vm_env)
            if self.config.vm_path:
                env["PATH"] = ":".join([*self.config.vm_path, env.get("PATH", "")])
            env["BENCH_METADATA_ENDPOINT"] = self._metadata_endpoint_for(inst)
            env["BENCH_FAKE_DNS"] = self._dns_address
            # Short: a socket's path under its TMPDIR (a fork server's) has 108 bytes at most.
            root = self._sandbox_root / f"{inst.zone}-{inst.id[-6:]}"
            inst.sandbox = VmSandbox(
                root, inst.name, self._poweroff_url_for(inst), env, inst.write_serial
            )
        else:
            inst.sandbox.halted.clear()
        script = inst.metadata_value("startup-script") if self.config.run_scripts else None
        inst.sandbox.start(script)

    def _sim_running_s(self, inst: FakeInstance, now: float) -> float:
        return (now - (inst.running_since or now)) * self.config.time_scale

    def _advance(self, inst: FakeInstance, now: float) -> None:
        cfg = self.config
        age = now - inst.status_since
        if inst.status == "PROVISIONING" and age >= cfg.provisioning_s:
            if inst.doomed_by is not None:
                for ops in inst.waiting_ops.values():
                    for op in ops:
                        op.finish(inst.doomed_by)
                self._remove(inst)
                return
            self._set_status(inst, "STAGING")
        elif inst.status == "STAGING" and age >= cfg.staging_s:
            self._set_status(inst, "RUNNING")
            self._boot(inst)
        elif inst.status == "RUNNING":
            self._check_running(inst, now)
        elif (
            inst.status == "STOPPING"
            and age >= cfg.stopping_s
            and (inst.sandbox is None or inst.sandbox.halted.is_set())
        ):
            # A stopped VM keeps its disk (billed) and loses its termination timer: "The
            # termination timestamp is automatically cleared whenever a VM is stopped"
            # (https://cloud.google.com/compute/docs/instances/limit-vm-runtime). Only
            # preemption and maxRunDuration carry instanceTerminationAction=DELETE.
            inst.poweroff_at = None
            inst.running_since = None
            self._set_status(inst, "TERMINATED")
        if inst.status == "TERMINATED" and inst.remove_when_down:
            self._remove(inst)

    def _check_running(self, inst: FakeInstance, now: float) -> None:
        running_s = self._sim_running_s(inst, now)
        limit = inst.max_run_sim_s()
        if inst.poweroff_at is not None and now >= inst.poweroff_at:
            self._begin_power_off(inst, "guest", self.config.shutdown_grace_s)
        elif limit is not None and running_s >= limit + self.config.max_run_lateness_sim_s:
            self._begin_power_off(inst, "maxRunDuration", self.config.shutdown_grace_s)
        elif inst.preempt_after_sim_s is not None and running_s >= inst.preempt_after_sim_s:
            inst.preempt_after_sim_s = None
            self._begin_power_off(inst, "preemption", self.config.preemption_grace_s)

    def _remove(self, inst: FakeInstance) -> None:
        self.instances.pop((inst.project, inst.zone, inst.name), None)
        inst.deleted = True
        inst.removed_at = time.monotonic()
        self.gone.append(inst)
        for ops in inst.waiting_ops.values():
            for op in ops:
                op.finish()
        inst.waiting_ops.clear()

    def billed_seconds(self, inst: FakeInstance) -> BilledSeconds:
        """What the instance has billed so far (all of it, once it is deleted)."""
        with self.lock:
            now = time.monotonic()
            machine = inst.machine_billed_sim_s
            if inst.status in MACHINE_BILLED_STATES and not inst.deleted:
                machine += (now - inst.status_since) * self.config.time_scale
            attached = ((inst.removed_at or now) - inst.created_at) * self.config.time_scale
        billed = max(BILLING_MINIMUM_S, math.ceil(machine)) if machine > 0 else 0
        return BilledSeconds(machine=billed, attached=math.ceil(attached))

    def _tick_loop(self) -> None:
        while not self._stop.wait(0.01):
            with self.lock:
                # A tick that waited for the lock while shutdown looked for VMs to kill: a VM
                # it booted now would outlive the stand-in (seen: a startup script alive 30
                # minutes after its test passed, under a loaded suite).
                if self._stop.is_set():
                    return
                now = time.monotonic()
                for inst in list(self.instances.values()):
                    self._advance(inst, now)

    def shutdown(self, keep_files: bool = False) -> None:
        """Stops the ticker and hard-kills every fake VM."""
        self._stop.set()
        self._ticker.join(timeout=5)
        with self.lock:
            everyone = list(self.instances.values()) + self.gone
        for inst in everyone:
            if inst.sandbox is not None and not inst.sandbox.halted.is_set():
                inst.sandbox.kill_now()
        if not keep_files:
            shutil.rmtree(self._sandbox_root, ignore_errors=True)
