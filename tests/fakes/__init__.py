"""Loopback stand-ins for Google Cloud used by the tests.

- `compute_server.FakeComputeServer`: Compute Engine v1 REST subset, with fake VMs that run
  the startup script in a sandbox and a metadata-server stand-in.
- `gcs.FakeGcs`: the real fake-gcs-server binary on 127.0.0.1.
- `fixtures`: pytest fixtures to import into a conftest.
"""
