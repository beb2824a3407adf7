"""GcsStore against the real fake-gcs-server, through the real google-cloud-storage client."""

from __future__ import annotations

import socket

import pytest

from orchestrator.config import BenchConfig
from orchestrator.errors import CloudError, ConfigError, NotFoundError, UsageError
from orchestrator.stores.gcs import GcsStore
from tests.fakes.fixtures import gcs_bucket, gcs_server  # noqa: F401 - fixtures


@pytest.fixture
def store(gcs_server, gcs_bucket):  # noqa: F811
    config = BenchConfig(
        project="bench-test-project",
        bucket=gcs_bucket,
        prefix="team/bench",
        storage_endpoint=gcs_server.endpoint,
    )
    return GcsStore(config)


def test_put_get_exists_and_uri(store, gcs_server, gcs_bucket):  # noqa: F811
    store.put_bytes("runs/r1/status.json", b'{"phase": "build"}')
    assert store.get_bytes("runs/r1/status.json") == b'{"phase": "build"}'
    assert store.exists("runs/r1/status.json")
    assert not store.exists("runs/r1/manifest.json")
    assert store.uri("runs/r1/status.json") == f"gs://{gcs_bucket}/team/bench/runs/r1/status.json"
    # The object really lives under the prefix, with a sensible content type.
    blob = gcs_server.client().bucket(gcs_bucket).get_blob("team/bench/runs/r1/status.json")
    assert blob.content_type == "application/json"


def test_put_file_and_download(store, tmp_path):
    source = tmp_path / "summary.csv"
    source.write_text("config,impl\nc1,flash\n")
    store.put_file("runs/r1/results/summary.csv", source)
    target = tmp_path / "out" / "deep" / "summary.csv"
    store.download("runs/r1/results/summary.csv", target)
    assert target.read_text() == "config,impl\nc1,flash\n"
    assert [p.name for p in target.parent.iterdir()] == ["summary.csv"]


def test_missing_objects_raise_not_found(store, tmp_path):
    with pytest.raises(NotFoundError, match="runs/nope/manifest.json"):
        store.get_bytes("runs/nope/manifest.json")
    with pytest.raises(NotFoundError):
        store.download("runs/nope/manifest.json", tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()
    assert not list(tmp_path.iterdir())


def test_list_is_relative_sorted_and_follows_pages(store, gcs_server, gcs_bucket):  # noqa: F811
    keys = [f"runs/r2/results/part-{i:03d}.csv" for i in range(1, 1100, 10)]
    for key in reversed(keys):
        store.put_bytes(key, b"x")
    store.put_bytes("runs/r3/status.json", b"{}")
    # Something outside the prefix must not show up.
    gcs_server.client().bucket(gcs_bucket).blob("elsewhere/runs/r2/x").upload_from_string(b"x")
    listed = store.list("runs/r2/")
    assert listed == sorted(keys)
    assert store.list("runs/") == sorted(keys + ["runs/r3/status.json"])
    assert store.list("runs/none/") == []


def test_list_pages_through_the_client(store, monkeypatch):
    # The client pages with maxResults/pageToken; force tiny pages to prove we follow them.
    for i in range(7):
        store.put_bytes(f"runs/r4/f{i}", b"x")
    bucket = store._bucket
    original = bucket.list_blobs
    monkeypatch.setattr(bucket, "list_blobs", lambda **kw: original(page_size=2, **kw))
    assert store.list("runs/r4/") == [f"runs/r4/f{i}" for i in range(7)]


def test_if_absent_refuses_to_overwrite(store):
    store.put_bytes("runs/r5/payload.tar.gz", b"one", if_absent=True)
    with pytest.raises(UsageError, match="already exists"):
        store.put_bytes("runs/r5/payload.tar.gz", b"two", if_absent=True)
    store.put_bytes("runs/r5/payload.tar.gz", b"three")
    assert store.get_bytes("runs/r5/payload.tar.gz") == b"three"


def test_a_missing_bucket_is_a_clear_config_error(gcs_server):  # noqa: F811
    config = BenchConfig(
        project="bench-test-project",
        bucket="no-such-bucket-here",
        storage_endpoint=gcs_server.endpoint,
    )
    with pytest.raises(ConfigError, match="gs://no-such-bucket-here does not exist"):
        GcsStore(config).get_bytes("runs/x/manifest.json")


def test_an_unreachable_endpoint_is_a_cloud_error_not_a_crash():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = BenchConfig(
        project="bench-test-project",
        bucket="bench-bucket",
        storage_endpoint=f"http://127.0.0.1:{port}",
    )
    store = GcsStore(config, retry_seconds=0.5)
    with pytest.raises(CloudError, match="cannot reach Cloud Storage") as failed:
        store.put_bytes("runs/r1/payload.tar.gz", b"x")
    assert failed.value.exit_code == 4 and "Connection refused" in str(failed.value)


@pytest.mark.parametrize(
    "key", ["runs/../../etc/passwd", "/runs/r1/x", "runs//x", "runs/./x", "a\\b", "a\nb", ""]
)
def test_keys_cannot_escape_the_prefix_or_name_two_objects(store, key):
    """The local store's rule: a key names one object under the prefix, on both backends."""
    with pytest.raises(UsageError, match="invalid store key"):
        store.put_bytes(key, b"x")
    assert store.list("") == []


@pytest.mark.slow
def test_importing_the_store_does_not_import_the_sdk():
    import subprocess
    import sys

    code = (
        "import sys, orchestrator.stores.gcs; "
        "sys.exit(any(m.startswith('google.cloud.storage') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
