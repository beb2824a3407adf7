"""The local store: the bucket layout under a directory of the state dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from orchestrator.errors import NotFoundError


class LocalStore:
    name = "local"

    def __init__(self, root: Path):
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"key {key!r} escapes the store")
        return path

    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.part.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)

    def put_file(self, key: str, path: Path) -> None:
        self.put_bytes(key, Path(path).read_bytes())

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"{self.uri(key)} does not exist") from None

    def download(self, key: str, path: Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise NotFoundError(f"{self.uri(key)} does not exist")
        shutil.copyfile(source, path)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and ".part." not in p.name
        )

    def uri(self, key: str) -> str:
        return str(self.root / key)
