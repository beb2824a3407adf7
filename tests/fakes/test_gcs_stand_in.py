"""fake-gcs-server, driven by google-cloud-storage and by the VM script's curl calls."""

from __future__ import annotations

import subprocess
import urllib.parse
from pathlib import Path

from tests.fakes import fixtures
from tests.fakes.gcs import FakeGcs

# Plain fixtures from tests/fakes/fixtures.py (a conftest may import them for every test).
gcs_server = fixtures.gcs_server
gcs_bucket = fixtures.gcs_bucket


def test_client_upload_list_download(gcs_server: FakeGcs, gcs_bucket: str):
    bucket = gcs_server.client().bucket(gcs_bucket)
    bucket.blob("runs/r1/results/summary.csv").upload_from_string(
        "a,b\n1,2\n", content_type="text/csv"
    )
    bucket.blob("runs/r1/manifest.json").upload_from_string("{}", if_generation_match=0)
    bucket.blob("runs/r2/manifest.json").upload_from_string("{}")

    listed = [b.name for b in gcs_server.client().list_blobs(gcs_bucket, prefix="runs/r1/")]
    assert listed == ["runs/r1/manifest.json", "runs/r1/results/summary.csv"]
    assert bucket.blob("runs/r1/results/summary.csv").download_as_text() == "a,b\n1,2\n"


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "-f", "-H", "Authorization: Bearer fake", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_curl_forms_used_by_the_vm(
    gcs_server: FakeGcs,
    gcs_bucket: str,
    tmp_path: Path,
):
    source = tmp_path / "startup.log"
    source.write_text("line 1\nline 2\n")
    name = "runs/r1/logs/startup.log"
    upload = (
        f"{gcs_server.endpoint}/upload/storage/v1/b/{gcs_bucket}/o"
        f"?uploadType=media&name={urllib.parse.quote(name, safe='')}"
    )
    assert (
        curl(
            "-X", "POST", "-H", "Content-Type: text/plain", "--data-binary", f"@{source}", upload
        ).returncode
        == 0
    )

    object_url = (
        f"{gcs_server.endpoint}/storage/v1/b/{gcs_bucket}/o/{urllib.parse.quote(name, safe='')}"
    )
    assert curl(f"{object_url}?alt=media").stdout == "line 1\nline 2\n"
    assert curl(f"{object_url}-missing?alt=media").returncode == 22  # 404 under -f

    blob = gcs_server.client().bucket(gcs_bucket).get_blob(name)
    assert blob.content_type == "text/plain" and blob.size == 14
