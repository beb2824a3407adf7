"""The GCS store: keys live at gs://<bucket>/<prefix>/<key>.

The only module that imports google.cloud.storage, lazily. With `storage_endpoint` set
(fake-gcs-server in tests) it talks to that endpoint without credentials.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import (
    BenchError,
    CloudError,
    ConfigError,
    NotFoundError,
    PermissionDeniedError,
    UsageError,
)

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

T = TypeVar("T")
_CONTENT_TYPES = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".log": "text/plain",
    ".gz": "application/gzip",
}


class GcsStore:
    name = "gcs"

    def __init__(self, config: BenchConfig) -> None:
        if not config.bucket:
            raise ConfigError("the gcs store needs a bucket: set `bucket` in bench.toml")
        self.bucket_name = config.bucket
        self.prefix = config.prefix.strip("/")
        self._project = config.project
        self._endpoint = config.storage_endpoint
        self._bucket_checked = False

    # -- client --------------------------------------------------------------------------

    @cached_property
    def _bucket(self):
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import storage

        try:
            if self._endpoint:
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=self._project or "bench-local",
                    credentials=AnonymousCredentials(),
                    client_options={"api_endpoint": self._endpoint},
                )
            else:
                client = storage.Client(project=self._project)
        except DefaultCredentialsError as e:
            raise ConfigError(
                f"no Google credentials found ({e}); run `gcloud auth application-default login`"
            ) from None
        return client.bucket(self.bucket_name)

    def _call(self, fn: Callable[[], T], key: str = "") -> T:
        """Run one request, the first time after checking the bucket exists."""
        if not self._bucket_checked:
            self._check_bucket()
        return self._translated(fn, key)

    def _check_bucket(self) -> None:
        # Listing one object needs only storage.objects.list, which anyone who can use the
        # bucket has (buckets.get would demand more); a missing bucket answers 404.
        self._translated(
            lambda: list(self._bucket.list_blobs(max_results=1, prefix=self.prefix + "/")),
            "",
            missing_bucket=True,
        )
        self._bucket_checked = True

    def _translated(self, fn: Callable[[], T], key: str, missing_bucket: bool = False) -> T:
        from google.api_core import exceptions

        try:
            return fn()
        except exceptions.NotFound as e:
            if missing_bucket:
                raise ConfigError(
                    f"bucket gs://{self.bucket_name} does not exist; create it with `gcloud "
                    f"storage buckets create gs://{self.bucket_name} --location=<region>` "
                    "or set `bucket` in bench.toml to one that exists"
                ) from e
            raise NotFoundError(f"{self.uri(key)} does not exist") from e
        except (exceptions.Forbidden, exceptions.Unauthorized) as e:
            raise PermissionDeniedError(
                f"no access to gs://{self.bucket_name} ({e.message}); you need "
                "roles/storage.objectAdmin on the bucket"
            ) from e
        except exceptions.PreconditionFailed as e:
            raise UsageError(f"{self.uri(key)} already exists and is not overwritten") from e
        except exceptions.GoogleAPICallError as e:
            raise CloudError(
                f"Cloud Storage error on {self.uri(key) if key else self.uri('')}: {e.message}"
            ) from e

    # -- the Store protocol --------------------------------------------------------------

    def object_name(self, key: str) -> str:
        key = key.lstrip("/")
        if not key or ".." in key.split("/"):
            raise UsageError(f"invalid store key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri(self, key: str) -> str:
        path = "/".join(p for p in (self.prefix, key.lstrip("/")) if p)
        return f"gs://{self.bucket_name}/{path}"

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Upload; with if_absent, refuse (UsageError) to replace an existing object."""
        blob = self._bucket.blob(self.object_name(key))
        self._call(lambda: blob.upload_from_string(data, **_upload_args(key, if_absent)), key)

    def put_file(self, key: str, path: Path, *, if_absent: bool = False) -> None:
        blob = self._bucket.blob(self.object_name(key))
        self._call(
            lambda: blob.upload_from_filename(str(path), **_upload_args(key, if_absent)), key
        )

    def get_bytes(self, key: str) -> bytes:
        blob = self._bucket.blob(self.object_name(key))
        return self._call(blob.download_as_bytes, key)

    def download(self, key: str, path: Path) -> None:
        """Download to path, via a temporary file so a failure never leaves half of it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.part.{os.getpid()}")
        blob = self._bucket.blob(self.object_name(key))
        try:
            self._call(lambda: blob.download_to_filename(str(partial)), key)
            partial.replace(path)
        except BenchError:
            partial.unlink(missing_ok=True)
            raise

    def exists(self, key: str) -> bool:
        blob = self._bucket.blob(self.object_name(key))
        return self._call(blob.exists, key)

    def list(self, prefix: str) -> list[str]:
        """Keys under prefix, relative to the store root, sorted (the client follows pages)."""
        root = f"{self.prefix}/" if self.prefix else ""
        full = root + prefix.lstrip("/")
        names = self._call(lambda: [b.name for b in self._bucket.list_blobs(prefix=full)])
        return sorted(name[len(root) :] for name in names)


def _upload_args(key: str, if_absent: bool) -> dict[str, Any]:
    from google.cloud.storage.retry import DEFAULT_RETRY

    suffix = Path(key).suffix
    content_type = _CONTENT_TYPES.get(suffix) or mimetypes.guess_type(key)[0]
    args: dict[str, Any] = {"content_type": content_type or "application/octet-stream"}
    if if_absent:
        # The client retries conditional uploads on its own: a repeat cannot clobber.
        args["if_generation_match"] = 0
    else:
        # Re-uploading the same bytes to the same key is harmless, so retry it too.
        args["retry"] = DEFAULT_RETRY
    return args
