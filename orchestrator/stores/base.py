"""The Store protocol: object storage with keys relative to bench's prefix.

A key looks like `runs/<run_id>/results/summary.csv`; each store maps it to its own place
(`<state>/store/<prefix>/...` or `gs://<bucket>/<prefix>/...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Store(Protocol):
    name: str

    def put_file(self, key: str, path: Path) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str) -> bytes:
        """Raise orchestrator.errors.NotFoundError when the object does not exist."""
        ...

    def download(self, key: str, path: Path) -> None: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Keys under prefix (relative to the store's root), sorted."""
        ...

    def uri(self, key: str) -> str:
        """Where a user would look for it: a path or gs:// URL."""
        ...
