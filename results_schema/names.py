"""Names both halves derive from a run id (stdlib only)."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

RUN_ID_PATTERN = r"^\d{8}-\d{6}-[0-9a-f]{6}$"


def new_run_id(now: datetime | None = None) -> str:
    """YYYYMMDD-HHMMSS-xxxxxx in UTC: sorts by time, unique enough to name a VM."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


# Content-Type of what a run stores, by suffix: the controller's uploads (stores/gcs.py) and
# the VM's (the gce partial's store_put, rendered from this) label objects alike.
CONTENT_TYPES = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".log": "text/plain",
    ".gz": "application/gzip",
}


def run_key(run_id: str) -> str:
    """The run's key prefix inside a store (the store adds its own bucket prefix)."""
    return f"runs/{run_id}"
