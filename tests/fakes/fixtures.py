"""Pytest fixtures for the stand-ins. Import them into a conftest.py:

from tests.fakes.fixtures import compute_server, gcs_server, gcs_bucket  # noqa: F401
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .compute_server import FakeComputeServer
from .gcs import FakeGcs
from .iam_server import FakeIamServer


def compute_client_options(server: FakeComputeServer) -> dict[str, Any]:
    """Keyword arguments for compute_v1.InstancesClient / ZoneOperationsClient(**kwargs)."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return {
        "credentials": AnonymousCredentials(),
        "transport": "rest",
        "client_options": ClientOptions(api_endpoint=server.endpoint),
    }


@pytest.fixture
def compute_server() -> Iterator[FakeComputeServer]:
    """A fresh compute + metadata stand-in per test (starting one takes milliseconds).

    Tune it in the test: `compute_server.config.time_scale = 600`,
    `compute_server.faults.stockout("us-central1-a")`, ... Its project is a new one, with
    no GPU quota: `compute_server.catalog.raise_gpu_quotas()` before starting GPU VMs.
    """
    with FakeComputeServer() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[FakeGcs]:
    """One fake-gcs-server per session (start ≈ 0.3 s); give each test its own bucket."""
    with FakeGcs() as server:
        yield server


@pytest.fixture
def gcs_bucket(gcs_server: FakeGcs) -> str:
    """A new, empty bucket on the session's fake-gcs-server; returns its name."""
    name = f"bench-test-{uuid.uuid4().hex[:12]}"
    gcs_server.client().create_bucket(name)
    return name


@pytest.fixture(scope="session")
def iam_credentials() -> Iterator[FakeIamServer]:
    """One IAM stand-in per session that signs (signBlob) as a project's signer account,
    which `sign_for(project)` creates: what launch needs to grant a run its objects where a
    test does not run `bench setup --apply`."""
    with FakeIamServer(unusable_uses=0) as server:

        def sign_for(project: str) -> str:
            email = f"bench-signer@{project}.iam.gserviceaccount.com"
            if email not in server.accounts:
                server.create_account(project, "bench-signer")
            return server.endpoint

        server.sign_for = sign_for  # type: ignore[attr-defined]
        yield server
