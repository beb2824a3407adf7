"""The Cloud Batch client, imported on first use like every Google library
(backends/gce/adaptor.py holds the rest: api_core, auth, protobuf)."""

from __future__ import annotations

from orchestrator.backends.gce.adaptor import LazyModule

batch_v1 = LazyModule("google.cloud.batch_v1")
