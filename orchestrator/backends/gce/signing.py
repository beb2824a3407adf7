"""A run's storage access, granted by the controller for that run alone (docs/security.md,
"Every name is public").

A VM's service account holds no role on the run objects: every name is public (internal
DNS gives any VM every other VM's name, https://cloud.google.com/compute/docs/internal-dns),
so a grant over a prefix would reach every run. Instead launch signs, for one run:

- a V4 signed URL to GET its payload
  (https://cloud.google.com/storage/docs/access-control/signed-urls), made by
  google-cloud-storage (`GcsStore.signed_get_url`);
- a V4 POST policy document whose conditions hold every upload to a key under the run's own
  folder, `["starts-with", "$key", "<prefix>/runs/<run id>/"]`, and below a size bound
  (https://cloud.google.com/storage/docs/authentication/signatures#policy-document,
  https://cloud.google.com/storage/docs/xml-api/post-object-forms). A prefix, not a list of
  keys: the VM names its cache candidates after what it built.

Both are signed by the signer service account `bench setup` creates (`bench-signer`), the
one identity holding the bucket role on runs/, through the IAM Service Account Credentials
API's signBlob (https://cloud.google.com/iam/docs/reference/credentials/rest/v1/
projects.serviceAccounts/signBlob): no key ever leaves Google. The caller needs
iam.serviceAccounts.signBlob on the signer (roles/iam.serviceAccountTokenCreator,
https://cloud.google.com/iam/docs/service-account-permissions#token-creator-role). A grant
lasts the run's time cap and a margin, at most the 7 days Google allows.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from orchestrator.errors import CloudError, PermissionDeniedError

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

IAMCREDENTIALS_ENDPOINT = "https://iamcredentials.googleapis.com"
SIGNER_ACCOUNT_ID = "bench-signer"
ALGORITHM = "GOOG4-RSA-SHA256"
# A V4 signature is valid for 7 days at most
# (https://cloud.google.com/storage/docs/access-control/signed-urls#example).
MAX_GRANT_SECONDS = 7 * 24 * 3600
# What a grant outlives the run's cap by: the EXIT trap's uploads after a late termination.
GRANT_MARGIN_SECONDS = 3600
# The largest object one upload of a run may write: a cache candidate (a venv of torch was
# 4.7 GB as tar) fits; garbage beyond it is refused by Cloud Storage.
MAX_OBJECT_BYTES = 8 * 1024**3
FORM_FIELDS = ("policy", "x-goog-algorithm", "x-goog-credential", "x-goog-date")


def signer_email(config: BenchConfig) -> str:
    return config.signer_account or f"{SIGNER_ACCOUNT_ID}@{config.project}.iam.gserviceaccount.com"


def grant_seconds(max_run_seconds: int) -> int:
    return min(MAX_GRANT_SECONDS, max_run_seconds + GRANT_MARGIN_SECONDS)


@dataclass(frozen=True)
class RunAccess:
    """What a run's script holds instead of a role: its payload's URL and its upload form."""

    payload_url: str
    upload_url: str
    upload_fields: dict[str, str]  # the form fields the VM sends beside key, type and file

    def template_vars(self) -> dict[str, Any]:
        return {
            "run_payload_url": self.payload_url,
            "run_upload_url": self.upload_url,
            "run_upload_fields": self.upload_fields,
        }


# What `bench render` shows and a script rendered without a launch holds: no grant.
NO_ACCESS = RunAccess("", "", {})


def post_policy(
    bucket: str, key_prefix: str, email: str, now: datetime, seconds: int
) -> tuple[str, dict[str, str]]:
    """The base64 policy document (what is signed) and the form fields it binds, as Google
    documents a V4 POST policy: credential scope `<date>/auto/storage/goog4_request`."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    credential = f"{email}/{now:%Y%m%d}/auto/storage/goog4_request"
    fields = {"x-goog-algorithm": ALGORITHM, "x-goog-credential": credential, "x-goog-date": stamp}
    conditions: list[Any] = [
        {"bucket": bucket},
        ["starts-with", "$key", key_prefix],
        ["starts-with", "$Content-Type", ""],
        ["content-length-range", 0, MAX_OBJECT_BYTES],
        *({name: value} for name, value in fields.items()),
    ]
    expiration = (now + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = json.dumps({"conditions": conditions, "expiration": expiration})
    policy = base64.b64encode(document.encode()).decode()
    return policy, {"policy": policy, **fields}


class IamSigner:
    """Signs bytes as the signer account through IAM Credentials' signBlob."""

    def __init__(self, config: BenchConfig) -> None:
        self.email = signer_email(config)
        self._endpoint = (config.iamcredentials_endpoint or IAMCREDENTIALS_ENDPOINT).rstrip("/")
        self._config = config
        self._session = None

    def sign(self, data: bytes) -> bytes:
        import requests

        from orchestrator.backends.gce.iam_api import _session

        if self._session is None:
            self._session = _session(self._config, self._config.iamcredentials_endpoint)
        url = f"{self._endpoint}/v1/projects/-/serviceAccounts/{self.email}:signBlob"
        body = {"payload": base64.b64encode(data).decode()}
        try:
            reply = self._session.post(url, json=body, timeout=60)
        except requests.RequestException as e:
            raise CloudError(f"cannot reach {self._endpoint} to sign a run's access ({e})") from e
        if reply.status_code in (401, 403, 404):
            raise PermissionDeniedError(
                f"may not sign as {self.email} ({reply.status_code}): run `bench setup --apply`, "
                "which creates that account, and hold roles/iam.serviceAccountTokenCreator on it"
            )
        if reply.status_code != 200:
            raise CloudError(f"signBlob as {self.email} failed ({reply.status_code})")
        return base64.b64decode(reply.json()["signedBlob"])

    def credentials(self):
        """The signer as google-auth Signing credentials, for google-cloud-storage."""
        from orchestrator.backends.gce.adaptor import auth_credentials

        signer = self

        class _Signing(auth_credentials.Signing):
            def sign_bytes(self, message: bytes) -> bytes:
                return signer.sign(message)

            @property
            def signer_email(self) -> str:
                return signer.email

            @property
            def signer(self):
                return self

        return _Signing()


def grant_run_access(config: BenchConfig, store, run_key: str, max_run_seconds: int) -> RunAccess:
    """Sign the run's payload URL and upload policy (two signBlob calls)."""
    from orchestrator.stores.gcs import DEFAULT_STORAGE_ENDPOINT

    signer = IamSigner(config)
    seconds = grant_seconds(max_run_seconds)
    endpoint = (config.storage_endpoint or DEFAULT_STORAGE_ENDPOINT).rstrip("/")
    payload_url = store.signed_get_url(
        f"{run_key}/payload.tar.gz", signer.credentials(), endpoint, seconds
    )
    policy, fields = post_policy(
        config.bucket,
        store.object_name(f"{run_key}/"),
        signer.email,
        datetime.now(timezone.utc),
        seconds,
    )
    fields["x-goog-signature"] = signer.sign(policy.encode()).hex()
    return RunAccess(payload_url, f"{endpoint}/{config.bucket}", fields)
