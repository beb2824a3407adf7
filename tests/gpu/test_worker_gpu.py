"""Users' kernels in worker processes on a real GPU: the CUDA clock and graph mode in the
child, and a kernel that makes an illegal memory access (its CUDA context is lost for
good) costs that config alone."""

from __future__ import annotations

import pytest
import torch

from tests.unit import test_isolation
from tests.unit.test_isolation import config, cpu_plan, gate, kernel_tree, run_whole, user_kernel

registered = test_isolation.registered  # the fixture, shared

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.timeout(900),
]

TRITON_WILD_STORE = """\
import triton
import triton.language as tl


@triton.jit
def wild_store(pointer):
    tl.store(pointer + (1 << 40), 1.0)  # far past any allocation: an illegal address
"""


def gpu_plan(kernels, configs, samples=20):
    plan = cpu_plan(kernels, configs, samples)
    return plan.model_copy(
        update={
            "device": "cuda",
            "flush_l2": True,
            "graph_below_us": 50.0,
            "configs": [c.model_copy(update={"dtype": "float16"}) for c in configs],
        }
    )


def gpu_kernel(identity, folder, **contract):
    kernel = user_kernel(identity, folder, **contract)
    supports = kernel.contract.supports.model_copy(
        update={"devices": ["cuda"], "dtypes": ["float16"]}
    )
    contract = kernel.contract.model_copy(update={"supports": supports})
    return kernel.model_copy(update={"contract": contract})


def test_an_illegal_address_costs_that_config_and_a_fresh_worker_takes_the_next(
    tmp_path, registered
):
    body = (
        "if q.shape[-1] == 16:\n"
        "    from pkg.wild import wild_store\n"
        "    wild_store[(1,)](q)\n"
        "    torch.cuda.synchronize()\n"
    )
    kernel_tree(tmp_path, "wild", "import torch\n" + body, {"wild.py": TRITON_WILD_STORE})
    plan = gpu_plan([gpu_kernel("wild", "wild")], [config("d16", 16), config("d64", 64)])
    registered(plan, tmp_path)

    rows = gate(plan)
    lost = rows[("d16", "wild")]
    assert not lost.passed
    assert lost.message.startswith(("CUDA context lost", "crashed")), lost.message
    assert rows[("d64", "wild")].passed, rows[("d64", "wild")].message
    assert all(rows[(c, "sdpa")].passed for c in ("d16", "d64"))


def test_a_kernel_in_its_worker_is_timed_in_graph_and_single_mode(tmp_path, registered):
    kernel_tree(tmp_path, "fine", "")
    small, large = (
        config("small", 64),
        config("large", 64).model_copy(
            update={"name": "large", "batch": 4, "heads": 16, "seq_len": 2048}
        ),
    )
    plan = gpu_plan([gpu_kernel("fine", "fine")], [small, large])
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    assert all(r.passed for r in checks), [r.message for r in checks if not r.passed]
    modes = {r.config: r.mode for r in summary if r.implementation == "fine"}
    assert modes == {"small": "graph", "large": "single"}
    assert all(r.n == plan.samples_per_config for r in summary)
