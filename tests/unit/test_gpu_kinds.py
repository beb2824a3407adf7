"""A GPU kind is told the same way wherever bench meets it: one row per kind
(results_schema/gpu_kinds.json), which the controller's machine table names and the harness
on the target reads from the payload."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

import pytest

from orchestrator.gpus import key_for_name, load_gpu_catalog, local_member
from orchestrator.payload import build_payload
from orchestrator.service.plans import resolve_plan
from results_schema.gpu_kinds import gpu_kinds, kind_of, percent_of_peak


@pytest.mark.parametrize(
    "smi_name, key",
    [
        ("NVIDIA L4", "l4"),
        ("Tesla T4", "t4"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        # Other kinds whose names hold a catalog kind's letters: not that kind.
        ("NVIDIA L40S", None),
        ("NVIDIA L40", None),
        ("NVIDIA GH200 480GB", None),
    ],
)
def test_an_nvidia_smi_name_is_the_catalog_kind_it_names_and_no_other(smi_name, key):
    assert key_for_name(smi_name, load_gpu_catalog()) == key


def test_a_local_l40s_is_not_recorded_as_an_l4():
    catalog = load_gpu_catalog()
    assert local_member(["local"], catalog, "NVIDIA L40S") == "local"


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_a_more_specific_kind_wins_over_the_words_it_shares(name, key):
    found = kind_of(name)
    assert (found.key if found else None) == key


def test_every_machine_names_the_kind_its_gpu_is():
    """The machine table and the kinds cannot disagree: a machine's GPU, named as the
    catalog names it, is the kind the machine declares."""
    for gpu in load_gpu_catalog().values():
        assert kind_of(gpu.name) == gpu.kind, gpu.key
        assert gpu.peak_tflops == gpu.kind.peak_tflops


def test_every_kind_has_its_figures_and_their_sources():
    keys = [kind.key for kind in gpu_kinds()]
    assert len(keys) == len(set(keys))
    for kind in gpu_kinds():
        assert kind.peak_tflops > 0 and kind.bandwidth_gb_s > 0, kind.key
        assert kind.arch.startswith("sm_") and kind.peak_tflops_source, kind.key


def test_one_percent_of_peak():
    assert percent_of_peak(60.5, 121.0) == pytest.approx(50.0)
    assert percent_of_peak(None, 121.0) is None and percent_of_peak(60.5, None) is None


def test_the_payload_carries_the_table_the_harness_reads(tmp_path):
    """The harness finds its GPU's peak in the payload as unpacked on the target, with no
    file of this checkout in reach."""
    plan, _ = resolve_plan("default", "gce")
    with tarfile.open(fileobj=io.BytesIO(build_payload(plan).data), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    assert (tmp_path / "results_schema" / "gpu_kinds.json").is_file()
    read = (
        "import json; from results_schema.gpu_kinds import kind_of; "
        "k = kind_of('NVIDIA H100 80GB HBM3'); print(json.dumps([k.peak_tflops, k.bandwidth_gb_s]))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, '.'); {read}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == [989.0, 3350.0]
