"""Zone operations of the compute stand-in."""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from datetime import datetime, timezone
from typing import Any

from .gce_errors import GceError

API_ROOT = "https://www.googleapis.com/compute/v1"
_ids = itertools.count(7_000_000_000_000_000_001)


def rfc3339_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Operation:
    """One long-running operation; `finish` marks it DONE, with or without an error."""

    def __init__(self, project: str, zone: str, op_type: str, target: str, target_id: str):
        self.project, self.zone = project, zone
        self.id = str(next(_ids))
        self.name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}"
        self._fields: dict[str, Any] = {
            "kind": "compute#operation",
            "id": self.id,
            "name": self.name,
            "zone": f"{API_ROOT}/projects/{project}/zones/{zone}",
            "operationType": op_type,
            "targetLink": f"{API_ROOT}/projects/{project}/zones/{zone}/instances/{target}",
            "targetId": target_id,
            "status": "RUNNING",
            "user": "fake-user@example.com",
            "progress": 0,
            "insertTime": rfc3339_now(),
            "startTime": rfc3339_now(),
            "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/operations/{self.name}",
        }
        self.done = threading.Event()
        self._lock = threading.Lock()

    def finish(self, error: GceError | None = None) -> None:
        with self._lock:
            if self.done.is_set():
                return
            self._fields.update(status="DONE", progress=100, endTime=rfc3339_now())
            if error is not None:
                self._fields.update(error.operation_fields())
            self.done.set()

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._fields)
