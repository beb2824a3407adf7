"""A VM's access scopes, enforced at the bucket (issue 32): a VM calls Cloud Storage with its
service account's token, which carries no more than the instance's access scopes; without
a scope that covers a method the call is refused whatever IAM grants
(https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam; which scopes
each storage method accepts: the storage v1 discovery document,
https://cloud.google.com/storage/docs/oauth-scopes). The bucket stand-in is
tests/fakes/gcs_proxy.py; the scopes bench asks for are builder.vm_scopes. A run's signed
grants carry no token, so no scope limits them (backends/gce/signing.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest

from orchestrator.backends.gce.iam import objects_condition
from tests.e2e.test_gce_cli import bucket_json, run_key_of
from tests.fakes.compute_state import project_number
from tests.fakes.gcs_proxy import GcsIamProxy, scope_allows
from tests.fakes.metadata_server import VM_TOKEN_PREFIX, TokenIdentity
from tests.limits import HANG_SECONDS

pytestmark = pytest.mark.timeout(240)

PROJECT = "bench-test-project"
DEFAULT_ACCOUNT = f"{project_number(PROJECT)}-compute@developer.gserviceaccount.com"
SCOPE = "https://www.googleapis.com/auth/"
READ_ONLY = SCOPE + "devstorage.read_only"
READ_WRITE = SCOPE + "devstorage.read_write"
CLOUD_PLATFORM = SCOPE + "cloud-platform"
COMPUTE = SCOPE + "compute"
SIGNER = f"bench-signer@{PROJECT}.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    "scope, reads, writes",
    [
        (READ_ONLY, True, False),
        (READ_WRITE, True, True),
        (SCOPE + "devstorage.full_control", True, True),
        (CLOUD_PLATFORM, True, True),
        (SCOPE + "cloud-platform.read-only", True, False),
        (COMPUTE, False, False),
    ],
)
def test_which_scope_reaches_which_storage_method(scope, reads, writes):
    assert [scope_allows(m, {scope}) for m in ("objects.get", "objects.list")] == [reads] * 2
    assert [scope_allows(m, {scope}) for m in ("objects.insert", "objects.delete")] == [writes] * 2


def _call(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {VM_TOKEN_PREFIX}bench-x")
    try:
        with urllib.request.urlopen(request, timeout=HANG_SECONDS) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_a_read_only_token_reads_but_its_upload_is_refused_although_iam_allows_it(
    gcs_server, gcs_bucket
):
    gcs_server.client().bucket(gcs_bucket).blob("bench/in.txt").upload_from_string(b"payload")
    identity = TokenIdentity(DEFAULT_ACCOUNT, frozenset({READ_ONLY, COMPUTE}))
    with GcsIamProxy(gcs_server.endpoint, lambda token: identity) as proxy:
        proxy.grant(f"serviceAccount:{DEFAULT_ACCOUNT}")  # IAM grants reads and writes
        objects = f"{proxy.endpoint}/storage/v1/b/{gcs_bucket}/o"
        assert _call(f"{objects}/bench%2Fin.txt")[0] == 200
        upload = f"{proxy.endpoint}/upload/storage/v1/b/{gcs_bucket}/o?uploadType=media"
        status, body = _call(f"{upload}&name=bench%2Fout.txt", "POST", b"result")
        assert status == 403
        assert body["error"]["message"] == "Provided scope(s) are not authorized"
        assert _call(f"{objects}/bench%2Fin.txt", "DELETE")[0] == 403
        assert [path for _, _, path in proxy.denied_for_scope] == [
            f"/upload/storage/v1/b/{gcs_bucket}/o",
            f"/storage/v1/b/{gcs_bucket}/o/bench%2Fin.txt",
        ]
    names = [b.name for b in gcs_server.client().list_blobs(gcs_bucket)]
    assert names == ["bench/in.txt"]


@pytest.fixture
def bucket_with_iam(gce, gcs_server, gcs_bucket, iam_credentials, monkeypatch):
    """The bucket behind the proxy as `bench setup` leaves it (docs/security.md): the signer
    of each run's grants holds object read and write on runs/, the VM's default account
    reads cache/ alone; signed requests are verified with the IAM stand-in's keys."""
    with GcsIamProxy(
        gcs_server.endpoint, gce.identity_of_token, public_key_of=iam_credentials.public_key
    ) as proxy:
        proxy.grant(f"serviceAccount:{SIGNER}", condition=_under(gcs_bucket, "runs"))
        proxy.grant(
            f"serviceAccount:{DEFAULT_ACCOUNT}",
            "roles/storage.objectViewer",
            condition=_under(gcs_bucket, "cache"),
        )
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", proxy.endpoint)
        yield proxy


def _under(bucket: str, folder: str) -> dict[str, str]:
    return {"title": folder, "expression": objects_condition(bucket, "bench", folder)}


def assert_the_vms_token_reads_only_and_its_signed_grants_uploaded(
    gce, gcs_server, gcs_bucket, bucket_with_iam, run_id: str
) -> None:
    """bench's VM carries the read-only storage scope: its token reads cache/ and nothing
    else, and its run still completes, since its payload and uploads go through the grants
    launch signed for it, which carry no token and no scope ("anyone who has the URL can use
    it", https://cloud.google.com/storage/docs/access-control/signed-urls). A write with the
    token is refused for its scope before IAM is asked. Checked on the whole gce run that
    tests/e2e/test_backend_protocol.py launches --wait behind bucket_with_iam (one gce run,
    ~7 s of CPU, for both); this leaves the proxy answering as the VM's token."""
    (sent,) = gce.inserted
    assert sent["serviceAccounts"][0]["scopes"] == [READ_ONLY]
    assert bucket_with_iam.denied == [] and bucket_with_iam.denied_for_scope == []
    run_key = run_key_of(run_id)
    manifest = bucket_json(gcs_server, gcs_bucket, f"bench/{run_key}/manifest.json")
    assert manifest is not None and manifest["status"] == "complete"
    # The same VM account's token, with the scope bench gives it, writing under its own key.
    identity = TokenIdentity(DEFAULT_ACCOUNT, frozenset({READ_ONLY}))
    bucket_with_iam.identity_of = lambda token: identity
    upload = f"{bucket_with_iam.endpoint}/upload/storage/v1/b/{gcs_bucket}/o?uploadType=media"
    name = quote(f"bench/{run_key}/results/summary.csv", safe="")
    status, body = _call(f"{upload}&name={name}", "POST", b"evil")
    assert status == 403
    assert body["error"]["message"] == "Provided scope(s) are not authorized"


# The scopes bench asks for let its VM upload its results: the whole gce run of
# tests/e2e/test_backend_protocol.py runs behind this proxy and asserts it (one run for both).
