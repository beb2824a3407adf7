"""Per-test fault injection for the compute stand-in.

Tests configure faults through `FakeComputeServer.faults` (a `FaultPlan`); the server asks
the plan before each call. Method names are the API's own: `instances.insert`,
`instances.get`, `instances.delete`, `instances.stop`, `instances.start`, `instances.list`,
`instances.aggregatedList`, `instances.getSerialPortOutput`, `zoneOperations.get`,
`zoneOperations.wait`; `"*"` matches every call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from . import gce_errors
from .gce_errors import GceError

# take_transient's answer when the connection is to be dropped without a reply.
DROP = GceError(0, "dropped", "DROPPED", "connection dropped by fault injection")
STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")


@dataclass
class _Stockout:
    code: str
    via: str  # "operation" (realistic: insert accepted, operation fails) or "http"
    spot_only: bool = False  # spot capacity gone, on-demand still available


@dataclass
class _Quota:
    quota: str
    region: str | None  # None: every region (GPUS_ALL_REGIONS style)
    via: str


@dataclass
class _Transient:
    method: str
    status: int  # 0: no answer at all, the connection is dropped
    remaining: int


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


class FaultPlan:
    """Faults to inject; every method is safe to call while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._stockouts: dict[str, _Stockout] = {}
        self._type_stockouts: dict[str, _Stockout] = {}  # machine type -> every zone
        self._missing_machine_types: dict[str, set[str] | None] = {}
        self._quotas: list[_Quota] = []
        self._transients: list[_Transient] = []
        self._latency: dict[str, float] = {}
        self._lost_answers: dict[str, int] = {}

    # -- configuration -------------------------------------------------------------------

    def stockout(
        self,
        zone: str,
        code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        via: str = "operation",
        spot_only: bool = False,
    ) -> None:
        """Inserts in `zone` (spot ones only, if `spot_only`) fail for lack of capacity
        until `clear_stockout(zone)`."""
        if code not in STOCKOUT_CODES or via not in ("operation", "http"):
            raise ValueError(f"bad stockout {code=} {via=}")
        with self._lock:
            self._stockouts[zone] = _Stockout(code, via, spot_only)

    def stockout_everywhere(self, machine_type: str, via: str = "operation") -> None:
        """Inserts of `machine_type` fail for lack of capacity in every zone (one GPU type
        sold out while others are not): the stockout error names the machine type and
        zone (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability)."""
        with self._lock:
            self._type_stockouts[machine_type] = _Stockout(STOCKOUT_CODES[0], via)

    def clear_stockout(self, zone: str) -> None:
        with self._lock:
            self._stockouts.pop(zone, None)

    def missing_machine_type(self, zone: str, machine_type: str | None = None) -> None:
        """Inserts in `zone` answer 400: the machine type (any, if None) does not exist."""
        with self._lock:
            if machine_type is None:
                self._missing_machine_types[zone] = None
            else:
                known = self._missing_machine_types.setdefault(zone, set())
                if known is not None:
                    known.add(machine_type)

    def quota_exceeded(
        self, quota: str = "NVIDIA_L4_GPUS", region: str | None = None, via: str = "operation"
    ) -> None:
        """Inserts in `region` (every region if None) fail with 403 QUOTA_EXCEEDED: by
        default inside the accepted insert's operation (httpErrorStatusCode 403,
        error.errors[].code), as an operation reports failure
        (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations);
        `via="http"` answers the insert itself with 403."""
        with self._lock:
            self._quotas.append(_Quota(quota, region, via))

    def fail_next(self, method: str = "*", status: int = 503, times: int = 1) -> None:
        """The next `times` calls of `method` answer `status` (429 or 503) and do nothing."""
        with self._lock:
            self._transients.append(_Transient(method, status, times))

    def drop_next(self, method: str = "*", times: int = 1) -> None:
        """The next `times` calls of `method` get no answer: the server closes the
        connection unanswered, as a network blip does, and does nothing."""
        with self._lock:
            self._transients.append(_Transient(method, 0, times))

    def lose_answer_next(self, method: str, times: int = 1) -> None:
        """The next `times` calls of `method` are carried out, but the connection closes
        before the answer is sent (a response lost on the way back)."""
        with self._lock:
            self._lost_answers[method] = self._lost_answers.get(method, 0) + times

    def take_lost_answer(self, method: str) -> bool:
        with self._lock:
            if self._lost_answers.get(method, 0) > 0:
                self._lost_answers[method] -= 1
                return True
        return False

    def latency(self, seconds: float, method: str = "*") -> None:
        """Every call of `method` waits `seconds` before it is handled."""
        with self._lock:
            self._latency[method] = seconds

    def clear(self) -> None:
        """Removes every fault."""
        with self._lock:
            self._reset()

    # -- queries used by the server ------------------------------------------------------

    def delay_for(self, method: str) -> float:
        with self._lock:
            return self._latency.get(method, self._latency.get("*", 0.0))

    def take_transient(self, method: str) -> GceError | None:
        """The error this call must answer with; `DROP` for no answer at all."""
        with self._lock:
            for fault in self._transients:
                if fault.remaining > 0 and fault.method in (method, "*"):
                    fault.remaining -= 1
                    return gce_errors.transient(fault.status) if fault.status else DROP
        return None

    def insert_failure(
        self, project: str, zone: str, machine_type: str, spot: bool = False
    ) -> tuple[GceError, str] | None:
        """The error an insert meets in `zone`, and how it surfaces ("http"/"operation")."""
        with self._lock:
            missing = self._missing_machine_types.get(zone, set())
            if zone in self._missing_machine_types and (missing is None or machine_type in missing):
                return gce_errors.machine_type_missing(zone, machine_type), "http"
            for quota in self._quotas:
                if quota.region is None or quota.region == region_of(zone):
                    return gce_errors.quota_exceeded(quota.quota, quota.region), quota.via
            stock = self._stockouts.get(zone) or self._type_stockouts.get(machine_type)
            if stock is not None and (spot or not stock.spot_only):
                return gce_errors.stockout(project, zone, stock.code, machine_type), stock.via
        return None
