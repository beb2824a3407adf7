"""Names both halves derive from a run id (stdlib only)."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

RUN_ID_PATTERN = r"^\d{8}-\d{6}-[0-9a-f]{6}$"
# Every name is public (internal DNS publishes VM names to the network): no name carries a
# secret, and a run reaches its own objects through grants launch signs for it alone
# (docs/security.md). Runs launched before this (issue 50) had 26 base32 characters of
# secret in their store key and instance name: the registry keeps theirs to find them.
LEGACY_RUN_SECRET_PATTERN = r"^([a-z2-7]{26})?$"


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


def _with_secret(run_id: str, secret: str) -> str:
    return f"{run_id}-{secret}" if secret else run_id


def run_key(run_id: str, legacy_secret: str = "") -> str:
    """The run's key prefix inside a store (the store adds its own bucket prefix):
    runs/<run id>, public like every name."""
    return f"runs/{_with_secret(run_id, legacy_secret)}"


def instance_name(run_id: str, legacy_secret: str = "") -> str:
    """bench-<run id>: 28 characters, public like every name."""
    return f"bench-{_with_secret(run_id, legacy_secret)}"
