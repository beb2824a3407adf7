"""The local store: the bucket layout under a directory of the state dir.

Anything under it may have been written by a run's script, so reads never follow a
symbolic link out of it and stop at the size the caller allows.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from orchestrator.errors import NotFoundError, ResultsError, UsageError
from orchestrator.regular_file import NotRegularFileError, open_regular
from orchestrator.stores.base import key_problem


class LocalStore:
    name = "local"

    def __init__(self, root: Path):
        self.root = root

    def require_credentials(self) -> None:
        """A folder of this machine needs none."""

    def _path(self, key: str) -> Path:
        """The file of this key, never outside the root: the key must be plain (see
        `key_problem`), and no symbolic link on its way may lead out of the root."""
        problem = key_problem(key)
        if problem:
            raise UsageError(f"invalid store key {key!r}: {problem}")
        path = self.root / key
        # Only what a run wrote can put a link here: untrusted data, refused as such.
        if not path.resolve().is_relative_to(self.root.resolve()):
            raise ResultsError(f"{self.uri(key)} leads out of the store {self.root}; refused")
        return path

    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.part.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)

    def put_file(self, key: str, path: Path) -> None:
        self.put_bytes(key, Path(path).read_bytes())

    def _open(self, key: str) -> int:
        """A read-only descriptor of a regular file reached through no symbolic link."""
        path = self._path(key)
        here = self.root
        for part in Path(key).parts:
            here = here / part
            if here.is_symlink():
                raise ResultsError(f"{self.uri(key)} is a symbolic link; refused")
        try:
            return open_regular(path)
        except FileNotFoundError:
            raise NotFoundError(f"{self.uri(key)} does not exist") from None
        except NotRegularFileError:
            raise ResultsError(f"{self.uri(key)} is not a regular file; refused") from None

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        """The object's bytes; with max_bytes, a larger object is refused unread."""
        with os.fdopen(self._open(key), "rb") as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:
            raise ResultsError(f"{self.uri(key)} is larger than {max_bytes} bytes; refused")
        return data

    def download(self, key: str, path: Path, max_bytes: int | None = None) -> None:
        with os.fdopen(self._open(key), "rb") as source, open(path, "wb") as target:
            if max_bytes is None:
                shutil.copyfileobj(source, target)
                return
            remaining = max_bytes + 1
            while remaining > 0 and (block := source.read(min(remaining, 1 << 20))):
                target.write(block)
                remaining -= len(block)
        if remaining <= 0:
            raise ResultsError(f"{self.uri(key)} is larger than {max_bytes} bytes; refused")

    def exists(self, key: str) -> bool:
        path = self._path(key)
        return path.is_file() and not path.is_symlink()

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and ".part." not in p.name
        )

    def copy(self, source: str, target: str) -> None:
        path = self._path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.part.{os.getpid()}")
        self.download(source, tmp)
        tmp.replace(path)

    def uri(self, key: str) -> str:
        return str(self.root / key)
