"""Our kernel's FP8 path as the harness sees it (issue 53): bench-kernel.toml declares
float8_e4m3fn, its supports check refuses FP8 off sm_90 with a reason of one line, and the
shipped `fp8` plan times `flash` on FP8 configs while SDPA's rows say it has no FP8 path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benches import registry
from benches.kernel_tree import load_entry, supports_check
from benches.plan import resolve_plan
from kernels import support
from orchestrator.kernel_tree.collect import package_dir
from orchestrator.kernel_tree.own import declaring_own_kernel, own_kernel
from results_schema import AttentionConfig, targets

FP8 = "float8_e4m3fn"


@pytest.fixture(scope="module")
def flash():
    (kernel,) = own_kernel("flash", None).kernels
    return kernel


@pytest.fixture(scope="module")
def flash_check(flash):
    """The contract's `supports.check`, resolved as the kernel's worker resolves it."""
    assert flash.contract.supports.check, "bench-kernel.toml declares no supports.check"
    return load_entry(package_dir("kernels").parent, flash.contract.supports.check)


def fp8_config(head_dim=128, causal=False):
    return AttentionConfig(
        name="c", batch=2, heads=16, seq_len=1024, head_dim=head_dim, dtype=FP8, causal=causal
    )


def shown(config, capability):
    """`config` as benches.kernel_tree.supports_check shows it to a check, on a GPU of
    `capability`."""
    return SimpleNamespace(
        **config.model_dump(exclude={"name", "kv_heads"}),
        kv_heads=config.key_heads,
        device="cuda",
        compute_capability=capability,
    )


def test_our_contract_declares_every_dtype_the_binding_takes(flash):
    from kernels.flash_attention import api

    declared = flash.contract.supports.dtypes
    assert FP8 in declared
    assert declared == [str(d).removeprefix("torch.") for d in api.ACCEPTED_DTYPES]
    assert api.FP8_DTYPE in api.ACCEPTED_DTYPES
    # One home for the FP8 head dims: the generator's units, the binding, the check.
    from kernels.flash_attention import generate

    assert generate.FP8_HEAD_DIMS == api.FP8_HEAD_DIMS == support.FP8_HEAD_DIMS == (128, 256)


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_configs_pass_the_contract_and_run_on_sm90(flash, flash_check, head_dim, causal):
    config = fp8_config(head_dim, causal)
    assert flash.contract.supports.refuses(config) is None
    assert flash_check(shown(config, (9, 0))) is None


def test_fp8_on_the_l4_is_refused_in_one_line_saying_wgmma_is_missing(flash_check):
    reason = flash_check(shown(fp8_config(), (8, 9)))
    assert reason == (
        "FP8 attention runs on sm_90 (H100, H200) only; this GPU is sm_89: FP8 wgmma does not "
        "exist there (sm_89 has FP8 tensor cores through mma.sync only)"
    )
    for capability in [(8, 0), (10, 0), (12, 0)]:
        other = flash_check(shown(fp8_config(), capability))
        assert other.startswith("FP8 attention runs on sm_90 (H100, H200) only; this GPU is ")
        assert "wgmma" in other and "\n" not in other


def test_fp8_refuses_head_dim_64_and_leaves_16_bit_configs_alone(flash, flash_check):
    d64 = fp8_config(head_dim=64)
    assert flash.contract.supports.refuses(d64) is None  # the keys hold for every dtype
    assert flash_check(shown(d64, (9, 0))) == "FP8 attention takes head_dim 128 or 256; got 64"
    bf16 = fp8_config().model_copy(update={"dtype": "bfloat16", "head_dim": 64})
    for capability in [(8, 0), (8, 9), (9, 0)]:
        assert flash_check(shown(bf16, capability)) is None


def test_the_harness_words_the_refusal_as_a_row_reason(flash_check):
    """Through supports_check, as a row records it (no GPU here: the CPU's answer)."""
    reason = supports_check(flash_check, fp8_config())
    assert (
        reason == "unsupported: FP8 attention runs on sm_90 (H100, H200) only; there is no GPU here"
    )
    assert supports_check(flash_check, fp8_config().model_copy(update={"dtype": "float16"})) is None


def test_fp8_plan_times_flash_on_fp8_configs_and_sdpa_says_no_fp8_path(flash):
    plan = resolve_plan("fp8")
    assert plan.candidate == "flash" and plan.device == "cuda"
    assert plan.configs and {c.dtype for c in plan.configs} == {FP8}
    assert {c.head_dim for c in plan.configs} == set(support.FP8_HEAD_DIMS)
    assert {c.causal for c in plan.configs} == {False, True}
    assert any(c.key_heads != c.heads for c in plan.configs)  # grouped-query too
    assert all(flash.contract.supports.refuses(c) is None for c in plan.configs)
    assert targets.plan_problems(declaring_own_kernel(plan), has_gpu=True) == []
    sdpa_rows = [n for n in plan.compared_with if n.startswith("sdpa")]
    assert sdpa_rows
    for name in sdpa_rows:
        assert registry.get(name).dtype_refusal(FP8) == (
            f"unsupported: dtype {FP8} ({registry.NO_FP8})"
        )
    assert registry.get(plan.reference).dtype_refusal(FP8) is None
