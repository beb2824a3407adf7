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
