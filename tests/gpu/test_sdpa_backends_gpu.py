"""On a real GPU, a row names the SDPA kernel that ran: every SDPA implementation of the
registry, on the dtypes and shapes that send SDPA's default to different backends (cuDNN
or flash on Hopper, flash on an L4, efficient or math for float32), its label against the
operator torch's profiler saw dispatched; with FA4 installed and activated, SDPA's flash
backend is recorded as FA4. The environment fingerprint carries the cuDNN torch loaded."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from benches import registry
from benches.environment import fingerprint
from results_schema.implementations import SDPA_BACKENDS
from tests.unit.test_sdpa_backends import backends_that_ran, inputs, recorded_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPES = {"d64": {"dim": 64}, "d128-long": {"dim": 128, "seq": 2048}, "gqa": {"kv_heads": 2}}


@pytest.mark.parametrize("name", ["sdpa", "sdpa-extra16", *SDPA_BACKENDS])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_the_recorded_backend_is_the_one_that_ran(name, dtype, causal, shape):
    impl = registry.get(name)
    q, k, v = inputs(torch.device("cuda"), dtype, **shape)
    label = impl.backend_for(q, k, v, causal)
    try:
        ran = backends_that_ran(impl.run, q, k, v, causal)
    except RuntimeError as exc:  # a pinned backend that refuses these inputs fails its row
        pytest.skip(f"{name} refuses {dtype} {shape}: {exc}")
    assert ran and ran[0] == recorded_backend(label), (label, ran)


def test_sdpa_flash_routed_to_fa4_is_recorded_as_fa4():
    from torch.nn import attention

    if not hasattr(attention, "activate_flash_attention_impl"):
        pytest.skip(f"torch {torch.__version__} cannot route SDPA's flash backend to FA4")
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("FA4 (flash-attn's cute interface) is not installed")
    if torch.cuda.get_device_capability()[0] not in (9, 10):
        pytest.skip("FA4 runs on Hopper and Blackwell")
    attention.activate_flash_attention_impl("FA4")
    try:
        q, k, v = inputs(torch.device("cuda"), torch.bfloat16, dim=128, seq=1024)
        pinned = registry.get("sdpa-flash")
        assert pinned.backend_for(q, k, v, False) == "sdpa:flash-fa4"
        assert backends_that_ran(pinned.run, q, k, v, False)[:1] == ["flash"]
        default = registry.get("sdpa")  # SDPA's own choice: flash (so FA4) or another
        label = default.backend_for(q, k, v, False)
        ran = backends_that_ran(default.run, q, k, v, False)
        assert ran[0] == recorded_backend(label), (label, ran)
        assert (label == "sdpa:flash-fa4") == (ran[0] == "flash"), (label, ran)
    finally:
        attention.restore_flash_attention_impl()


def test_the_fingerprint_records_the_cudnn_torch_loaded():
    env = fingerprint()
    if not torch.backends.cudnn.is_available():
        pytest.skip("this torch has no cuDNN")
    assert env.cudnn == str(torch.backends.cudnn.version())
