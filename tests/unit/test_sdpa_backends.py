"""A row names the SDPA kernel that ran: the registry's label (`backend_for`, what
correctness.csv and summary.csv record) against the operator torch's profiler saw
dispatched, for every SDPA implementation this machine runs; and SDPA's flash backend named
by the FlashAttention torch routes it to (FA4 on Hopper, once activated). The same check on
a GPU, every backend: tests/gpu/test_sdpa_backends_gpu.py."""

from __future__ import annotations

import pytest
import torch

from benches import registry

# SDPA's operators, by the backend that runs each (aten's names, as the profiler records
# the dispatch): CPU's flash kernel has an operator of its own.
OPERATOR_BACKENDS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


def backends_that_ran(run, *args) -> list[str]:
    """The SDPA backends whose operators a call dispatched, in order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(*args)
    return [OPERATOR_BACKENDS[e.name] for e in prof.events() if e.name in OPERATOR_BACKENDS]


def recorded_backend(label: str) -> str:
    """The backend a row's label names: 'sdpa:flash-fa4' runs SDPA's flash backend."""
    family, _, kernel = label.partition(":")
    assert family == "sdpa", label
    return kernel.split("-")[0]


def inputs(device, dtype, heads=4, kv_heads=4, seq=64, dim=32):
    generator = torch.Generator(device="cpu").manual_seed(0)

    def tensor(h):
        return torch.randn(2, h, seq, dim, generator=generator).to(device=device, dtype=dtype)

    return tensor(heads), tensor(kv_heads), tensor(kv_heads)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sdpa", "sdpa-math", "sdpa-extra16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_the_recorded_backend_is_the_one_that_ran_on_the_cpu(name, dtype, causal, kv_heads):
    impl = registry.get(name)
    q, k, v = inputs(torch.device("cpu"), dtype, kv_heads=kv_heads)
    label = impl.backend_for(q, k, v, causal)
    ran = backends_that_ran(impl.run, q, k, v, causal)
    assert ran and ran[0] == recorded_backend(label), (label, ran)


def test_an_activated_flash_implementation_is_named_where_it_runs():
    """torch routes SDPA's flash backend of CUDA tensors to a FlashAttention activated in
    the process (torch.nn.attention.activate_flash_attention_impl: FA4 on Hopper and
    Blackwell), CPU tensors still to its own kernel; the label follows. The provider
    registered here through torch's own registry installs no kernel: only its name
    matters."""
    from torch.nn import attention

    if not hasattr(attention, "activate_flash_attention_impl"):
        pytest.skip(f"torch {torch.__version__} routes SDPA's flash backend to FA2 only")

    class Handle:
        removed = False

        def remove(self) -> None:
            self.removed = True

    handle = Handle()
    attention.register_flash_attention_impl("BENCHTEST", register_fn=lambda: handle)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert registry.flash_kernel(cuda) == "flash"
    attention.activate_flash_attention_impl("BENCHTEST")
    try:
        assert registry.flash_kernel(cuda) == "flash-benchtest"
        assert registry.flash_kernel(cpu) == "flash"
        q, k, v = inputs(cpu, torch.float32)
        assert registry.get("sdpa-flash").backend_for(q, k, v, False) == "sdpa:flash"
        assert registry.default_sdpa_backend(q, k, v, False) == "sdpa:flash"
    finally:
        attention.restore_flash_attention_impl()
    assert handle.removed and registry.flash_kernel(cuda) == "flash"
