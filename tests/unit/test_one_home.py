"""Values derived in one place only: each test holds a former second derivation to the one
home, so a copy that drifts fails here."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.config import BenchConfig, region_of, regions_of
from orchestrator.render import template_environment
from orchestrator.spec import RunSpec
from results_schema.names import CONTENT_TYPES, RUN_ID_PATTERN, new_run_id, run_key

REPO = Path(__file__).resolve().parents[2]


def test_the_recorded_nvcc_is_the_one_the_build_finds(tmp_path, monkeypatch):
    from benches.environment import _nvcc_version

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.99'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not on PATH: only CUDA_HOME finds it
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert _nvcc_version() == "Cuda compilation tools, release 12.4, V12.4.99"
    # The harness cannot import our kernel's build.py (a kernel tree of its own): its own
    # discovery must find what the build finds.
    from benches.environment import _find_nvcc
    from kernels.flash_attention.build import find_nvcc

    assert _find_nvcc() == find_nvcc() == str(nvcc)


def test_the_vm_labels_uploads_with_the_controllers_content_types():
    from orchestrator.backends.gce.script_vars import template_vars

    config = BenchConfig(project="my-project-1", bucket="my-bucket")
    partial = template_environment().get_template("partials/backend/gce.sh.j2")
    text = partial.render(**template_vars(config))
    rendered = dict(re.findall(r"\*'?(\.\w+)'?\) content_type='?([\w/]+)'? ;;", text))
    assert rendered == CONTENT_TYPES


def test_regions_come_from_one_rule():
    assert region_of("europe-west4-b") == "europe-west4"
    assert regions_of(["us-central1-a", "us-east4-c", "us-central1-b"]) == [
        "us-central1",
        "us-east4",
    ]
    # Pricing takes a zone's region by the same rule (what a VM there bills).
    from orchestrator.backends.gce.pricing import hourly_rate

    for zone in ("us-central1-a", "us-central1-f"):
        config = BenchConfig(project="my-project-1", bucket="my-bucket", zones=[zone])
        assert hourly_rate(config, spot=True).region == region_of(zone)


def test_a_run_id_and_its_key_have_one_shape():
    run_id = new_run_id()
    assert re.match(RUN_ID_PATTERN, run_id)
    assert run_key(run_id) == f"runs/{run_id}"
    assert RunSpec.model_fields["run_id"].metadata[0].pattern == RUN_ID_PATTERN
    spec = RunSpec.model_construct(run_id=run_id)
    assert spec.run_prefix == run_key(run_id)  # what render and the stores use
