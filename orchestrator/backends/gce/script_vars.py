"""What a Compute Engine VM's script needs of the settings (startup_templates/partials/
backend/gce.sh.j2): the bucket, the endpoints, whether the VM may delete itself. A run's
script (GceBackend, Cloud Batch's) and `doctor --probe`'s read them here, below both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.backends.gce.builder import vm_may_delete_itself
from orchestrator.backends.gce.compute import DEFAULT_COMPUTE_ENDPOINT
from orchestrator.backends.gce.signing import NO_ACCESS
from orchestrator.errors import ConfigError
from orchestrator.stores.gcs import DEFAULT_STORAGE_ENDPOINT
from results_schema.names import CONTENT_TYPES

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig

DEFAULT_METADATA_ENDPOINT = "http://metadata.google.internal/computeMetadata/v1"


def template_vars(config: BenchConfig) -> dict:
    """What startup_templates/partials/backend/gce.sh.j2 needs, for render_startup."""
    if not config.bucket:
        raise ConfigError("the gce backend needs a bucket: set `bucket` in bench.toml")
    return {
        "bucket": config.bucket,
        "prefix": config.prefix,
        "storage_endpoint": (config.storage_endpoint or DEFAULT_STORAGE_ENDPOINT).rstrip("/"),
        "metadata_endpoint": (config.metadata_endpoint or DEFAULT_METADATA_ENDPOINT).rstrip("/"),
        "compute_endpoint": (config.compute_endpoint or DEFAULT_COMPUTE_ENDPOINT).rstrip("/"),
        "self_delete": vm_may_delete_itself(config),
        "preflight_tools": ["curl", "shutdown"],
        "content_types": CONTENT_TYPES,
        **NO_ACCESS.template_vars(),  # launch signs each run's own (run_access_vars)
    }
