"""A GPU kind is told the same way wherever bench meets it: the catalog key of a GPU that
nvidia-smi names, and its peak as the VM's payload and the controller's catalog know it."""

from __future__ import annotations

import pytest

from benches.environment import peak_tflops_for
from orchestrator.gpus import key_for_name, load_gpu_catalog, local_member


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


def test_the_catalogs_peak_is_the_one_the_payload_measures_against():
    """Until both halves read one table (issue 33, phase B), the controller's catalog and
    the VM's peak table must agree for every GPU bench can start."""
    for gpu in load_gpu_catalog().values():
        assert peak_tflops_for(gpu.name) == gpu.peak_tflops, gpu.key
