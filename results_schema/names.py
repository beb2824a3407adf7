"""Names both halves derive from a run id (stdlib only)."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timezone

RUN_ID_PATTERN = r"^\d{8}-\d{6}-[0-9a-f]{6}$"
# A run's capability: 130 random bits in lowercase base32, in its store key and its
# instance name. A VM's identity may create and delete objects under runs/ and delete
# instances named bench-*, but may list neither, so the only run it can name is its own
# (docs/security.md). "" marks a run launched before runs had one.
RUN_SECRET_PATTERN = r"^([a-z2-7]{26})?$"


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


def new_run_secret() -> str:
    return base64.b32encode(secrets.token_bytes(17)).decode().lower()[:26]


def _with_secret(run_id: str, secret: str) -> str:
    return f"{run_id}-{secret}" if secret else run_id


def run_key(run_id: str, secret: str = "") -> str:
    """The run's key prefix inside a store (the store adds its own bucket prefix)."""
    return f"runs/{_with_secret(run_id, secret)}"


def instance_name(run_id: str, secret: str = "") -> str:
    """bench-<run id>-<secret>: 55 characters, inside GCE's 63."""
    return f"bench-{_with_secret(run_id, secret)}"
