"""The GCS store: keys live at gs://<bucket>/<prefix>/<key>.

The only module that uses google.cloud.storage, through the lazy adaptor
(backends/gce/adaptor.py). With `storage_endpoint` set (fake-gcs-server in tests) it talks
to that endpoint without credentials.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.backends.gce.adaptor import (
    api_exceptions,
    auth_credentials,
    auth_exceptions,
    storage,
    storage_retry,
)
from orchestrator.errors import (
    BenchError,
    CloudError,
    ConfigError,
    NotFoundError,
    PermissionDeniedError,
    ResultsError,
    UsageError,
    network_reason,
)
from orchestrator.stores.base import key_problem
from results_schema.names import CONTENT_TYPES

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

T = TypeVar("T")
# How long one call keeps retrying what is transient (429, 5xx, dropped connections): the
# client library's own default.
RETRY_SECONDS = 120.0
DEFAULT_STORAGE_ENDPOINT = "https://storage.googleapis.com"


class GcsStore:
    name = "gcs"

    def __init__(self, config: BenchConfig, *, retry_seconds: float = RETRY_SECONDS) -> None:
        if not config.bucket:
            raise ConfigError("the gcs store needs a bucket: set `bucket` in bench.toml")
        self.bucket_name = config.bucket
        self.prefix = config.prefix.strip("/")
        self._project = config.project
        self._endpoint = config.storage_endpoint
        self._retry_seconds = retry_seconds
        self._bucket_checked = False

    # -- client --------------------------------------------------------------------------

    def require_credentials(self) -> None:
        """Application Default Credentials found (the client is made: no network call)."""
        self._bucket  # noqa: B018 (made for its ConfigError)

    @cached_property
    def _bucket(self):
        try:
            if self._endpoint:
                client = storage.Client(
                    project=self._project or "bench-local",
                    credentials=auth_credentials.AnonymousCredentials(),
                    client_options={"api_endpoint": self._endpoint},
                )
            else:
                client = storage.Client(project=self._project)
        except auth_exceptions.DefaultCredentialsError as e:
            raise ConfigError(
                f"no Google credentials found ({e}); run `gcloud auth application-default login`"
            ) from None
        return client.bucket(self.bucket_name)

    @cached_property
    def _retry(self):
        return storage_retry.DEFAULT_RETRY.with_timeout(self._retry_seconds)

    def _call(self, fn: Callable[[], T], key: str = "") -> T:
        """Run one request, the first time after checking the bucket exists."""
        if not self._bucket_checked:
            self._check_bucket()
        return self._translated(fn, key)

    def _check_bucket(self) -> None:
        # Listing one object needs only storage.objects.list, which anyone who can use the
        # bucket has (buckets.get would demand more); a missing bucket answers 404.
        self._translated(
            lambda: list(
                self._bucket.list_blobs(max_results=1, prefix=self.prefix + "/", retry=self._retry)
            ),
            "",
            missing_bucket=True,
        )
        self._bucket_checked = True

    def _translated(self, fn: Callable[[], T], key: str, missing_bucket: bool = False) -> T:
        from requests import RequestException

        try:
            return fn()
        except (
            api_exceptions.GoogleAPIError,
            auth_exceptions.GoogleAuthError,
            RequestException,
        ) as e:
            raise self._error_for(e, key, missing_bucket) from e

    def _error_for(self, error: Exception, key: str, missing_bucket: bool) -> BenchError:
        """One bench error for what the client raised (RetryError: what it met last)."""
        if isinstance(error, api_exceptions.RetryError) and isinstance(error.cause, Exception):
            error = error.cause
        if isinstance(error, api_exceptions.NotFound):
            if missing_bucket:
                return ConfigError(
                    f"bucket gs://{self.bucket_name} does not exist; create it with `gcloud "
                    f"storage buckets create gs://{self.bucket_name} --location=<region>` "
                    "or set `bucket` in bench.toml to one that exists"
                )
            return NotFoundError(f"{self.uri(key)} does not exist")
        if isinstance(error, (api_exceptions.Forbidden, api_exceptions.Unauthorized)):
            return PermissionDeniedError(
                f"no access to gs://{self.bucket_name} ({error.message}); you need "
                "roles/storage.objectAdmin on the bucket"
            )
        if isinstance(error, api_exceptions.PreconditionFailed):
            return UsageError(f"{self.uri(key)} already exists and is not overwritten")
        if isinstance(error, api_exceptions.GoogleAPICallError):
            return CloudError(f"Cloud Storage error on {self.uri(key)}: {error.message}")
        if isinstance(error, auth_exceptions.RefreshError):
            return PermissionDeniedError(
                f"the Google credentials could not be refreshed ({error}); run "
                "`gcloud auth application-default login` and try again"
            )
        # No HTTP answer at all: connection refused or reset, DNS, timeouts.
        return CloudError(
            f"cannot reach Cloud Storage at {self._endpoint or DEFAULT_STORAGE_ENDPOINT} "
            f"({network_reason(error)}); check the network connection (and "
            "`storage_endpoint`, if set) and try again"
        )

    # -- the Store protocol --------------------------------------------------------------

    def object_name(self, key: str) -> str:
        """The object's name: the prefix and a plain key (the local store's rule, so a key
        names one object under the prefix on both backends)."""
        problem = key_problem(key)
        if problem:
            raise UsageError(f"invalid store key {key!r}: {problem}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri(self, key: str) -> str:
        path = "/".join(p for p in (self.prefix, key.lstrip("/")) if p)
        return f"gs://{self.bucket_name}/{path}"

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Upload; with if_absent, refuse (UsageError) to replace an existing object."""
        blob = self._bucket.blob(self.object_name(key))
        args = _upload_args(key, if_absent, self._retry)
        self._call(lambda: blob.upload_from_string(data, **args), key)

    def put_file(self, key: str, path: Path, *, if_absent: bool = False) -> None:
        blob = self._bucket.blob(self.object_name(key))
        args = _upload_args(key, if_absent, self._retry)
        self._call(lambda: blob.upload_from_filename(str(path), **args), key)

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        """The object's bytes; with max_bytes, at most one byte more is ever transferred and
        a larger object is refused."""
        blob = self._bucket.blob(self.object_name(key))
        args = _download_args(max_bytes, self._retry)
        data = self._call(lambda: _ranged(lambda: blob.download_as_bytes(**args), b""), key)
        if max_bytes is not None and len(data) > max_bytes:
            raise ResultsError(f"{self.uri(key)} is larger than {max_bytes} bytes; refused")
        return data

    def download(self, key: str, path: Path, max_bytes: int | None = None) -> None:
        """Download to path, via a temporary file so a failure never leaves half of it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.part.{os.getpid()}")
        blob = self._bucket.blob(self.object_name(key))
        args = _download_args(max_bytes, self._retry)
        try:
            self._call(
                lambda: _ranged(lambda: blob.download_to_filename(str(partial), **args), None),
                key,
            )
            partial.touch()  # an empty object answered 416 and wrote nothing
            if max_bytes is not None and partial.stat().st_size > max_bytes:
                raise ResultsError(f"{self.uri(key)} is larger than {max_bytes} bytes; refused")
            partial.replace(path)
        except BenchError:
            partial.unlink(missing_ok=True)
            raise

    def signed_get_url(self, key: str, credentials: Any, endpoint: str, seconds: int) -> str:
        """A V4 signed URL that lets its holder GET this one object for `seconds`, signed by
        `credentials` (google-auth Signing: signing.IamSigner's signBlob), on `endpoint`
        (https://cloud.google.com/storage/docs/access-control/signed-urls)."""
        from datetime import timedelta

        blob = self._bucket.blob(self.object_name(key))
        return self._translated(
            lambda: blob.generate_signed_url(
                version="v4",
                method="GET",
                expiration=timedelta(seconds=seconds),
                credentials=credentials,
                api_access_endpoint=endpoint,
            ),
            key,
        )

    def exists(self, key: str) -> bool:
        blob = self._bucket.blob(self.object_name(key))
        return self._call(lambda: blob.exists(retry=self._retry), key)

    def list(self, prefix: str) -> list[str]:
        """Keys under prefix, relative to the store root, sorted (the client follows pages)."""
        root = f"{self.prefix}/" if self.prefix else ""
        full = root + prefix.lstrip("/")
        names = self._call(
            lambda: [b.name for b in self._bucket.list_blobs(prefix=full, retry=self._retry)]
        )
        return sorted(name[len(root) :] for name in names)

    def copy(self, source: str, target: str) -> None:
        """A server-side copy (objects.copy): the bytes never pass through this machine."""
        blob = self._bucket.blob(self.object_name(source))
        name = self.object_name(target)
        self._call(
            lambda: self._bucket.copy_blob(blob, self._bucket, name, retry=self._retry), source
        )

    def delete(self, key: str) -> None:
        blob = self._bucket.blob(self.object_name(key))
        self._call(lambda: blob.delete(retry=self._retry), key)

    def bucket_exists(self) -> bool:
        return self._translated(lambda: self._bucket.exists(retry=self._retry), "")

    def uniform_access_enabled(self) -> bool:
        """Whether the bucket has uniform bucket-level access, which IAM Conditions need."""

        def read() -> bool:
            bucket = self._bucket.client.get_bucket(self.bucket_name, retry=self._retry)
            return bool(bucket.iam_configuration.uniform_bucket_level_access_enabled)

        return self._translated(read, "")

    def create_bucket(self, location: str) -> None:
        """A bucket with uniform bucket-level access (IAM only, no object ACLs)."""
        bucket = self._bucket
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        self._translated(lambda: bucket.create(location=location, retry=self._retry), "")

    def keep_lifecycle_rule(self, rule: dict[str, Any]) -> bool:
        """Put `rule` in the bucket's lifecycle configuration (buckets.patch, `lifecycle.rule`:
        https://cloud.google.com/storage/docs/json_api/v1/buckets); a rule of the same action
        on the same `matchesPrefix` (an earlier setup's, another age) gives way to it, every
        other rule stays. False when the bucket holds it already."""

        def update() -> bool:
            bucket = self._bucket.client.get_bucket(self.bucket_name, retry=self._retry)
            rules = [dict(r) for r in bucket.lifecycle_rules]
            if rule in rules:
                return False
            others = [r for r in rules if not _same_lifecycle_target(r, rule)]
            bucket.lifecycle_rules = [*others, rule]
            bucket.patch(retry=self._retry)
            return True

        return self._translated(update, "", missing_bucket=True)

    def grant(self, role: str, member: str, condition: dict[str, str] | None = None) -> bool:
        """Bind `member` to `role` (under `condition`) in the bucket's IAM policy; False when
        the policy already holds that binding. A binding of the same role and member under
        another condition (an earlier setup's) gives way to it. Conditions need policy
        version 3 (https://cloud.google.com/storage/docs/access-control/using-iam-permissions
        #policy-with-conditions)."""

        def update() -> bool:
            policy = self._bucket.get_iam_policy(requested_policy_version=3, retry=self._retry)
            wanted = {"role": role, "members": {member}}
            if condition:
                wanted["condition"] = condition
            bindings = list(policy.bindings)
            if any(_same_binding(b, wanted) for b in bindings):
                return False
            others = [b for b in bindings if not (b["role"] == role and member in b["members"])]
            policy.version = 3
            policy.bindings = [*others, wanted]
            self._bucket.set_iam_policy(policy, retry=self._retry)
            return True

        return self._translated(update, "", missing_bucket=True)

    def role_members(self) -> dict[str, set[str]]:
        """The bucket's IAM policy: role -> members (e.g. "serviceAccount:x@p.iam..."),
        whatever their conditions."""
        policy = self._translated(
            lambda: self._bucket.get_iam_policy(requested_policy_version=3, retry=self._retry),
            "",
            missing_bucket=True,
        )
        return {binding["role"]: set(binding["members"]) for binding in policy.bindings}


def _same_binding(binding: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return (
        binding["role"] == wanted["role"]
        and wanted["members"] <= set(binding["members"])
        and binding.get("condition") == wanted.get("condition")
    )


def _download_args(max_bytes: int | None, retry: Any) -> dict[str, Any]:
    # raw_download: the stored bytes, never a decompressed stream (a gzip-encoded object
    # could inflate without bound); the caller checks them against the manifest's sha256.
    args: dict[str, Any] = {"retry": retry, "raw_download": True}
    if max_bytes is not None:
        args.update(start=0, end=max_bytes)  # `end` is inclusive: one byte more tells
    return args


def _ranged(download: Callable[[], T], empty: T) -> T:
    """A range read of an empty object answers 416 Range Not Satisfiable: it is empty."""
    try:
        return download()
    except api_exceptions.RequestRangeNotSatisfiable:
        return empty


def _upload_args(key: str, if_absent: bool, retry: Any) -> dict[str, Any]:
    suffix = Path(key).suffix
    content_type = CONTENT_TYPES.get(suffix) or mimetypes.guess_type(key)[0]
    # Retrying is safe either way: re-uploading the same bytes to the same key is harmless,
    # and with if_generation_match=0 a repeat cannot clobber (it answers 412).
    args: dict[str, Any] = {
        "content_type": content_type or "application/octet-stream",
        "retry": retry,
    }
    if if_absent:
        args["if_generation_match"] = 0
    return args


def _same_lifecycle_target(one: dict[str, Any], other: dict[str, Any]) -> bool:
    def target(rule: dict[str, Any]) -> tuple:
        condition = rule.get("condition", {})
        return rule.get("action", {}).get("type"), tuple(condition.get("matchesPrefix", []))

    return target(one) == target(other)
