"""The Store protocol: object storage with keys relative to bench's prefix.

A key looks like `runs/<run_id>/results/summary.csv`; each store maps it to its own place
(`<state>/store/<prefix>/...` or `gs://<bucket>/<prefix>/...`).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Protocol


def key_problem(key: str) -> str | None:
    """Why this key could name something outside the store, or two things, or None: a key
    is relative, its segments are neither empty nor '.' nor '..' (a list prefix may end in
    one '/'), with no backslash and no control character."""
    if not key or key.startswith("/"):
        return "a key is a relative path"
    if "\\" in key or any(unicodedata.category(ch) == "Cc" for ch in key):
        return "a key holds no backslash or control character"
    if any(segment in ("", ".", "..") for segment in key.removesuffix("/").split("/")):
        return "a key has no empty, '.' or '..' segment"
    return None


class Store(Protocol):
    name: str

    def require_credentials(self) -> None:
        """Raise ConfigError now if the store cannot be reached for want of credentials:
        checked before a launch records anything (no network call)."""
        ...

    def put_file(self, key: str, path: Path) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        """Raise NotFoundError when the object does not exist, ResultsError when it holds
        more than max_bytes (never reading much more than that)."""
        ...

    def download(self, key: str, path: Path, max_bytes: int | None = None) -> None:
        """Like get_bytes, into a file."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Keys under prefix (relative to the store's root), sorted."""
        ...

    def copy(self, source: str, target: str) -> None:
        """Copy one object inside the store (server-side where the store has it)."""
        ...

    def uri(self, key: str) -> str:
        """Where a user would look for it: a path or gs:// URL."""
        ...
