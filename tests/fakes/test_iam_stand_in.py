"""The IAM stand-in's service-account policies, as Google documents them (iam_server.py)."""

from __future__ import annotations

import base64

import pytest
import requests

from tests.fakes.iam_policy import CONTROLLER_MEMBER
from tests.fakes.iam_server import FakeIamServer

PROJECT = "p"
SIGNER = f"bench-signer@{PROJECT}.iam.gserviceaccount.com"
ALICE = "user:alice@example.com"
CREATOR = "roles/iam.serviceAccountTokenCreator"


@pytest.fixture
def iam():
    with FakeIamServer(unusable_uses=0) as server:
        server.create_account(PROJECT, "bench-signer")
        yield server


def _policy_call(iam, verb: str, email: str = SIGNER, body=None) -> requests.Response:
    url = f"{iam.endpoint}/v1/projects/{PROJECT}/serviceAccounts/{email}:{verb}IamPolicy"
    return requests.post(url, json=body, timeout=10)


def _sign(iam) -> int:
    url = f"{iam.endpoint}/v1/projects/-/serviceAccounts/{SIGNER}:signBlob"
    payload = {"payload": base64.b64encode(b"x").decode()}
    return requests.post(url, json=payload, timeout=10).status_code


def test_an_accounts_own_policy_is_read_modified_and_written_with_its_etag(iam):
    policy = _policy_call(iam, "get").json()
    assert "bindings" not in policy
    policy["bindings"] = [{"role": CREATOR, "members": [ALICE]}]
    stored = _policy_call(iam, "set", body={"policy": policy})
    assert stored.status_code == 200 and stored.json()["etag"] != policy["etag"]
    assert _policy_call(iam, "get").json()["bindings"] == policy["bindings"]
    # The etag read before the change is stale now: 409 ABORTED.
    assert _policy_call(iam, "set", body={"policy": policy}).status_code == 409
    assert _policy_call(iam, "get", f"nobody@{PROJECT}.iam.gserviceaccount.com").status_code == 404
    # A body the discovery document does not allow is a 400, and recorded.
    assert _policy_call(iam, "set", body={"policy": policy, "x": 1}).status_code == 400
    assert len(iam.schema_violations) == 1
    iam.schema_violations.clear()  # that one was this test's own


def test_token_creator_on_the_account_lets_its_holder_sign_and_no_one_else(iam):
    iam.caller = ALICE  # not the project's owner: holds nothing on the project
    assert _sign(iam) == 403
    assert _policy_call(iam, "get").status_code == 403  # nor may read the account's policy
    iam.caller = CONTROLLER_MEMBER
    policy = _policy_call(iam, "get").json()
    policy["bindings"] = [{"role": CREATOR, "members": [ALICE]}]
    assert _policy_call(iam, "set", body={"policy": policy}).status_code == 200
    iam.caller = ALICE
    assert _sign(iam) == 200
    iam.caller = "user:bob@example.com"
    assert _sign(iam) == 403


def test_concurrent_first_signatures_all_verify_with_the_accounts_one_key(iam):
    """signBlob signs with the account's one system-managed key
    (https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/signBlob):
    every signature of a fresh account's first concurrent calls verifies against the key the
    stand-in publishes. Before, each call made a key when it found none, and the last one
    stored won: a sweep's two launches signed at once and one run's payload URL was refused
    (SignatureDoesNotMatch), seen under load."""
    import threading

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    url = f"{iam.endpoint}/v1/projects/-/serviceAccounts/{SIGNER}:signBlob"
    start = threading.Barrier(8)
    signed: list[tuple[int, bytes]] = []

    def sign(n: int) -> None:
        payload = {"payload": base64.b64encode(b"blob %d" % n).decode()}
        start.wait()
        reply = requests.post(url, json=payload, timeout=60).json()
        signed.append((n, base64.b64decode(reply["signedBlob"])))

    threads = [threading.Thread(target=sign, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    key = iam.public_key(SIGNER)
    assert len(signed) == 8
    for n, signature in signed:  # raises InvalidSignature where another key signed
        key.verify(signature, b"blob %d" % n, padding.PKCS1v15(), hashes.SHA256())
