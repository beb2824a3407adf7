"""Google's client libraries come in through one lazy adaptor (backends/gce/adaptor.py): every
gce module and the GCS store load without them, and the first use imports them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

GCE_MODULES = (
    "orchestrator.backends.gce.backend",
    "orchestrator.backends.gce.compute",
    "orchestrator.backends.gce.doctor",
    "orchestrator.backends.gce.setup",
    "orchestrator.backends.gce.probe_run",
    "orchestrator.backends.gce.project_resources",
    "orchestrator.backends.gce.iam_api",
    "orchestrator.stores.gcs",
    "orchestrator.service.doctor",
    "orchestrator.service.setup",
)


def google_modules_after(code: str) -> list[str]:
    probe = (
        f"import json, sys; {code}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('google'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_gce_modules_load_without_any_google_library():
    imports = "; ".join(f"import {module}" for module in GCE_MODULES)
    assert google_modules_after(imports) == []


@pytest.mark.slow
def test_the_first_use_imports_the_module_and_its_types_are_googles_own():
    loaded = google_modules_after(
        "from orchestrator.backends.gce.adaptor import api_exceptions, compute_v1; "
        "from google.api_core.exceptions import NotFound; "
        "assert api_exceptions.NotFound is NotFound; "
        "assert compute_v1.Instance(name='x').name == 'x'"
    )
    assert "google.cloud.compute_v1" in loaded and "google.api_core.exceptions" in loaded
    assert "google.cloud.storage" not in loaded  # only what was used
