"""Our FlashAttention forward against the float64 reference, judged by what SDPA achieves.

Error tolerance is relative to SDPA's own error in the same dtype on the same inputs, so the
test asks "as accurate as PyTorch", not "under a magic number". Inputs are fresh random
tensors every run; outputs are poisoned with NaN first, and NaN/Inf never pass.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benches.reference import reference_attention, reference_lse

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = [64, 128, 256]
SEQLENS = [1, 17, 97, 128, 1000, 1025, 4096]
BATCH_HEADS = [(1, 2), (2, 3)]


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def lse_bound(dtype: torch.dtype) -> float:
    """The lse contract (flash_attention_with_lse): within the input dtype's unit roundoff of
    the exact log-sum-exp, where the Hopper D = 64 non-causal kernels sum P as rounded for P V
    (bf16 2^-8, fp16 2^-11), plus 1e-5 for the float32 sums (the FADD paths measure 2e-6)."""
    return torch.finfo(dtype).eps / 2 + 1e-5


def run_poisoned(q, k, v, causal, scale=None):
    """Runs the kernel after filling the allocator's next blocks with NaN.

    The output is allocated inside the call, so poison memory of the same size first and free
    it: the caching allocator hands the same blocks back to the kernel's outputs.
    """
    from kernels.flash_attention import flash_attention_with_lse

    poison_o = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
    poison_lse = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device=q.device)
    del poison_o, poison_lse
    out, lse = flash_attention_with_lse(q, k, v, causal=causal, scale=scale)
    torch.cuda.synchronize()
    return out, lse


def assert_close_to_reference(q, k, v, causal, out, lse):
    assert torch.isfinite(out).all(), "output has NaN/Inf (unwritten or overflowed)"
    assert torch.isfinite(lse).all(), "lse has NaN/Inf"
    ref = reference_attention(q, k, v, causal)
    gqa = k.shape[1] != q.shape[1]
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    err_ours, err_sdpa = rel_l2(out, ref), rel_l2(sdpa, ref)
    assert err_ours <= 2 * err_sdpa + 1e-5, f"rel L2 {err_ours:.3e} vs SDPA {err_sdpa:.3e}"
    lse_err = (lse.double() - reference_lse(q, k, causal)).abs().max().item()
    assert lse_err <= lse_bound(q.dtype), f"lse max abs error {lse_err:.3e}"


@pytest.mark.parametrize("batch_heads", BATCH_HEADS, ids=lambda bh: f"b{bh[0]}h{bh[1]}")
@pytest.mark.parametrize("seqlen", SEQLENS, ids=lambda s: f"s{s}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_matches_reference(dtype, head_dim, causal, seqlen, batch_heads):
    batch, heads = batch_heads
    q, k, v = (
        torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype) for _ in range(3)
    )
    out, lse = run_poisoned(q, k, v, causal)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    assert lse.dtype == torch.float32
    assert_close_to_reference(q, k, v, causal, out, lse)


# Other kernel paths are measurement builds (csrc/switches.h): a fresh process of this module
# builds and loads one when this variable holds its switches, e.g. "FLASH_DISABLE_SM90=1".
SWITCHES_ENV = "FLASH_TEST_SWITCHES"
# The L4 (sm_89) has 100 KB of shared memory per SM; the launcher picks its kernel variant
# from that (NOTES.md, "L4 path").
L4_SWITCHES = "FLASH_EMULATE_SMEM_PER_SM=102400 FLASH_DISABLE_SM90=1"
OTHER_PATH_SELECTION = (
    "(test_matches_reference and (s17 or s97 or s1025 or s4096)) or test_any_finite"
    " or test_strided or test_fewer or test_causal_rows or test_row_maxima or test_causal_heads"
    " or test_grouped_query or test_plan_boundaries or test_split_tail"
)


@pytest.fixture(scope="module", autouse=True)
def library_under_test():
    from kernels.flash_attention import build, load_library

    return load_library(defines=build.parse_defines(os.environ.get(SWITCHES_ENV, "").split()))


def run_with_switches(switches: str) -> None:
    repo_root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "--noconftest", "-p", "no:cacheprovider"]
    env = {**os.environ, SWITCHES_ENV: switches}
    proc = subprocess.run(
        [*cmd, "-k", OTHER_PATH_SELECTION], env=env, cwd=repo_root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-2000:]


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
def test_l4_variant_matches_reference():
    """The kernel an L4 runs, under L4 emulation, in a fresh process over odd and long shapes."""
    run_with_switches(L4_SWITCHES)


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the sm_80 fallback of an sm_90 GPU",
)
def test_sm80_path_on_hopper_matches_reference():
    """The sm_80 kernel (the wide variant) that the Hopper path falls back to, on its own."""
    run_with_switches("FLASH_DISABLE_SM90=1")


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's shapes",
)
def test_hopper_three_consumers_and_paired_tiles_everywhere():
    """The Hopper path's 192-row block (three consumer warpgroups) at every D = 64 shape, and
    causal launches as a persistent grid over paired tiles at every length, in a fresh process:
    the shipped code takes each only over a range of lengths (sm90_plan)."""
    run_with_switches("FLASH_SM90_SHAPE_D64=2 FLASH_SM90_CAUSAL_SCHEDULE=2")


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's ring",
)
def test_hopper_ring_from_zero_everywhere():
    """Every Hopper kernel's persistent block taking each of its tiles from the K/V ring's stage
    0, the stages' use parities carried (FLASH_SM90_RING_FROM_ZERO=2; shipped for three
    consumers only, NOTES "h45", "h46"), with three consumers at every D = 64 shape, in a fresh
    process."""
    run_with_switches("FLASH_SM90_RING_FROM_ZERO=2 FLASH_SM90_SHAPE_D64=2")


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's solo kernel",
)
def test_hopper_solo_kernel_everywhere():
    """The solo kernel, its rows summed against a block of ones on the tensor core with no
    alignment pad (NOTES.md h47), at every D = 64 shape (FLASH_SM90_SHAPE_D64=3: solo
    non-causal too), in a fresh process."""
    run_with_switches("FLASH_SM90_SHAPE_D64=3")


def exponentials_under_pv(sass: str) -> dict[str, int]:
    """Per Hopper kernel in cuobjdump's SASS: the MUFU.EX2 between the key loop's wait for
    S_j (WARPGROUP.DEPBAR.LE gsb0, 0x1) and its wait for P_{j-1} V_{j-1} (0x0), that is,
    the exponentials that run while P V is in flight."""
    counts = {}
    for func in re.split(r"\n\s+Function : ", sass)[1:]:
        name = func.split("\n", 1)[0].strip()
        # The split's combine (flash_split_combine_kernel) has no key loop.
        if "Sm90Traits" not in name or "combine" in name:
            continue
        waits = [m.start() for m in re.finditer(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", func)]
        if not waits:
            counts[name] = 0
            continue
        rest = func[waits[0] :]
        end = re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", rest)
        counts[name] = rest[: end.start() if end else len(rest)].count("MUFU.EX2")
    return counts


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's SASS",
)
@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
def test_hopper_softmax_runs_under_the_previous_pv():
    """Every Hopper kernel's key loop exponentiates tile j while P_{j-1} V_{j-1} is in flight.
    ptxas placed the wait for P V right after the wait for S until the kernel pinned it
    (sm90::order_wait_after; NOTES.md, h10), which ran the softmax after P V had landed. With
    one P buffer the wait now comes after the first 16-key steps' exponentials only (h53: two
    steps, 16 a thread, all but the last step's in the solo kernel), so that P's packing runs
    under the rest; with two buffers (D = 128) after all of them."""
    from kernels.flash_attention import build

    library = build.build()["library"]
    sass = subprocess.run(
        ["cuobjdump", "-sass", str(library)], capture_output=True, text=True, check=True
    ).stdout
    counts = exponentials_under_pv(sass)
    assert counts, "no Hopper kernel in the library"
    # 8 scores per thread and 16-key step; ptxas places 19-21 (D = 64 and 256, two steps),
    # 58 (solo, seven) and 66 (D = 128, all eight and the correction's).
    late = {name[:100]: n for name, n in counts.items() if n < 16}
    assert not late, f"softmax not under P V in: {late}"


# Lengths on both sides of the Hopper path's plan boundaries (flash_fwd_launch_sm90.cuh,
# sm90_plan): D = 64 non-causal takes three consumer warpgroups (192-row blocks) from 257 query
# rows (257: the last block's second warpgroup has one row, its third none; 1153: the last
# block's second and third none); causal D = 64 runs solo blocks (64 rows) at every length, and
# 8191 and 8257 are odd lengths for them.
# Causal takes paired tiles up to 64 query blocks of 128 rows (8192) and one block per tile
# beyond.
PLAN_BOUNDARIES = [(64, False, 256), (64, False, 257), (64, False, 1153), (64, True, 8191)]
PLAN_BOUNDARIES += [(64, True, 8257)]
PLAN_BOUNDARIES += [(128, True, 8192), (128, True, 8193)]


@pytest.mark.parametrize(
    ("head_dim", "causal", "seqlen"),
    PLAN_BOUNDARIES,
    ids=[f"d{d}-{'causal' if c else 'full'}-s{s}" for d, c, s in PLAN_BOUNDARIES],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_plan_boundaries(dtype, head_dim, causal, seqlen):
    q, k, v = (torch.randn(1, 2, seqlen, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    out, lse = run_poisoned(q, k, v, causal)
    assert_close_to_reference(q, k, v, causal, out, lse)


def hopper_blocks_launched(q, k, v, causal) -> list[str]:
    """The block of each Hopper kernel one call launches, from the kernel's name in the
    profiler: "solo" (flash_fwd_sm90_solo_kernel) or its consumer warpgroups, "2" or "3"
    (Sm90Traits<Elem, HeadDim, BlockN, Stages, ConsumerWarpgroups, ...>)."""
    from kernels.flash_attention import flash_attention_with_lse

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        flash_attention_with_lse(q, k, v, causal=causal)
        torch.cuda.synchronize()
    consumers = re.compile(
        r"Sm90Traits<[^,]+, \d+, \d+, \d+, (\d+)|Sm90TraitsI\w+?Li\d+ELi\d+ELi\d+ELi(\d+)E"
    )
    names = [event.name for event in prof.events() if "flash_fwd_sm90" in event.name]
    return [
        "solo" if "solo" in name else next(g for g in consumers.search(name).groups() if g)
        for name in names
    ]


# Which block the plan picks at D = 64 (kSm90Solo, sm90_plan): non-causal three consumer
# warpgroups from 257 query rows (NOTES.md, h40: 0.93x two at 256, 1.01-1.20x from 320), causal
# solo blocks at every length (h43).
PLAN_SHAPES = [(False, 256, "2"), (False, 257, "3"), (False, 1024, "3")]
PLAN_SHAPES += [(True, 256, "solo"), (True, 1024, "solo"), (True, 8192, "solo")]


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's plan",
)
@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.parametrize(("causal", "seqlen", "block"), PLAN_SHAPES)
def test_hopper_plan_picks_the_measured_block(causal, seqlen, block):
    q, k, v = (torch.randn(1, 2, seqlen, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    assert hopper_blocks_launched(q, k, v, causal) == [block]


# The rounds rule and the split last round (sm90_plan, NOTES.md h49, h49b, h50): D = 64
# non-causal at 4096 rows, batch 2, on the H200's or H100's 132 SMs: 10 heads leave the
# three-consumer grid's fourth round a third full (440 units), and the shipped plan splits that
# round over the keys (the split grid, then its combine); 9 heads fill three rounds (one grid).
WAVE_SHAPES = [(10, torch.bfloat16, ["TailSplit", "combine"]), (9, torch.bfloat16, ["grid"])]
WAVE_SHAPES += [(10, torch.float16, ["TailSplit", "combine"])]
WAVE_IDS = ["bf16-h10", "bf16-h9", "fp16-h10"]


@pytest.mark.skipif(
    not torch.cuda.is_available()
    or torch.cuda.get_device_capability() != (9, 0)
    or torch.cuda.get_device_properties(0).multi_processor_count != 132,
    reason="the Hopper path's plan on 132 SMs",
)
@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.parametrize(("heads", "dtype", "kernels"), WAVE_SHAPES, ids=WAVE_IDS)
def test_hopper_plan_fills_the_last_round(heads, dtype, kernels):
    q, k, v = (torch.randn(2, heads, 4096, 64, device="cuda", dtype=dtype) for _ in range(3))
    assert hopper_blocks_launched(q, k, v, False) == ["3"]
    assert hopper_kernel_names(q, k, v, False) == kernels
    out, lse = run_poisoned(q, k, v, False)
    assert_close_to_reference(q, k, v, False, out, lse)


# The three-consumer D = 64 grid's last round split over the keys (flash_fwd_sm90_split.cuh,
# NOTES.md h50) on 132 SMs: (batch, q heads, kv heads, query rows, keys). 2 x 10 x 4096: 440
# units, 44 in the last round over 32 key tiles each; 20 x 1153: 140 units whose every seventh
# has one row (the block's second and third consumers pass their pieces), keys 1000 (the last
# key tile masked in the last piece) and 1153 (both split only under FLASH_SM90_SPLIT_TAIL=2:
# units of 8-10 key tiles); GQA 10/2; 3 x 11 x 2048: 363 units, 99 in the last round (the
# shipped rule's edge, three quarters full).
SPLIT_SHAPES = [(2, 10, 10, 4096, 4096), (1, 20, 20, 1153, 1000), (1, 20, 20, 1153, 1153)]
SPLIT_SHAPES += [(2, 10, 2, 4096, 4096), (3, 11, 11, 2048, 2048)]


@pytest.mark.parametrize(("batch", "heads", "kv_heads", "rows", "keys"), SPLIT_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_split_tail_shapes(dtype, batch, heads, kv_heads, rows, keys):
    """Correct on any build; where the split is switched on (FLASH_SM90_SPLIT_TAIL) and the GPU
    has 132 SMs, the call ran the split grid and its combine."""
    q = torch.randn(batch, heads, rows, 64, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, keys, 64, device="cuda", dtype=dtype) for _ in range(2))
    out, lse = run_poisoned(q, k, v, False)
    assert_close_to_reference(q, k, v, False, out, lse)
    switches = os.environ.get(SWITCHES_ENV, "")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if "FLASH_SM90_SPLIT_TAIL=2" in switches and torch.cuda.get_device_capability() == (9, 0):
        if sms == 132:
            assert hopper_kernel_names(q, k, v, False) == ["TailSplit", "combine"]


def hopper_kernel_names(q, k, v, causal) -> list[str]:
    """Per kernel one call launches: "TailSplit" (the split grid, flash_fwd_sm90_kernel with a
    TailSplit), "combine" (its combine), or "grid" (any other Hopper kernel, NoTailSplit's)."""
    from kernels.flash_attention import flash_attention_with_lse

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        flash_attention_with_lse(q, k, v, causal=causal)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "flash_fwd_sm90" in e.name or "combine" in e.name]
    split = re.compile(r"(?<!No)TailSplit")
    return [
        "combine" if "combine" in n else "TailSplit" if split.search(n) else "grid" for n in names
    ]


# A fresh process: the library loaded and its unsplit grid run once (its local memory sized; no
# split call yet, so the split's memory pool holds nothing), then the device filled to within
# 6-8 MB, less than the split's workspace at 10 heads: (132 blocks + 44 tail units) slots of 192
# rows x 65 floats, 8,785,920 bytes. The call's O and lse take blocks of their size that torch's
# allocator holds in its cache. That the call then succeeds, correct, is the fallback: the split
# could not have run (and the profiler cannot say which grid ran: CUPTI fails to start on a full
# device).
NO_WORKSPACE_PROGRAM = """
import torch
from benches.reference import reference_attention
from kernels.flash_attention import flash_attention_with_lse
q, k, v = (torch.randn(2, 10, 4096, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
warm = [torch.randn(2, 9, 4096, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
flash_attention_with_lse(*warm)
reference = reference_attention(q, k, v, False).float().cpu()
spare = [torch.empty_like(q), torch.empty(q.shape[:3], device="cuda")]
torch.cuda.synchronize()
hog = []
while torch.cuda.mem_get_info()[0] > 96 << 20:
    hog.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
# One block of the rest but 6-8 MB: torch maps a block of 10 MB or more at its size (rounded up
# to 2 MB), a smaller one in a segment of 20 MB, which would fail here.
rest = (torch.cuda.mem_get_info()[0] - (6 << 20)) // (2 << 20) * (2 << 20)
hog.append(torch.empty(rest, dtype=torch.uint8, device="cuda"))
del spare
free = torch.cuda.mem_get_info()[0]
assert free < (132 + 44) * 192 * (64 + 1) * 4, free  # sm90_split_workspace_bytes at 10 heads
out, lse = flash_attention_with_lse(q, k, v)
torch.cuda.synchronize()
error = ((out.float().cpu() - reference).norm() / reference.norm()).item()
assert torch.isfinite(lse).all() and error < 1.6e-2, error
print("unsplit grid ran, error", error, "free bytes", free)
"""


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available()
    or torch.cuda.get_device_capability() != (9, 0)
    or torch.cuda.get_device_properties(0).multi_processor_count != 132,
    reason="the Hopper path's split last round on 132 SMs",
)
def test_split_without_memory_for_its_workspace_runs_the_unsplit_grid():
    """Where the split's workspace cannot be allocated (the device full), the launcher runs the
    unsplit grid and the call succeeds (NOTES.md h51), in a fresh process."""
    repo_root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", NO_WORKSPACE_PROGRAM],
        cwd=repo_root,
        env={
            **os.environ,
            "PYTHONPATH": f"{repo_root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        },
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "unsplit grid ran" in proc.stdout


@pytest.mark.skipif(bool(os.environ.get(SWITCHES_ENV)), reason="this process is a switched build")
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper path's split last round",
)
def test_hopper_last_round_split_everywhere():
    """The three-consumer grid's last round split over the keys wherever it is partial
    (FLASH_SM90_SPLIT_TAIL=2), three consumers at every non-causal D = 64 length
    (FLASH_SM90_WAVE_PLAN=1), in a fresh process."""
    run_with_switches("FLASH_SM90_SPLIT_TAIL=2 FLASH_SM90_WAVE_PLAN=1")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strided_inputs(causal):
    """q, k, v as views of a packed (B, S, 3, H, D) projection: no copy, odd strides."""
    batch, seqlen, heads, head_dim = 2, 333, 4, 64
    packed = torch.randn(batch, seqlen, 3, heads, head_dim, device="cuda", dtype=torch.float16)
    q, k, v = (packed[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    out, lse = run_poisoned(q, k, v, causal)
    assert_close_to_reference(q, k, v, causal, out, lse)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fewer_queries_than_keys(causal):
    q = torch.randn(2, 3, 97, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 3, 1025, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, lse = run_poisoned(q, k, v, causal)
    ref = reference_attention(q, k, v, causal)
    assert torch.isfinite(out).all()
    assert rel_l2(out, ref) <= 1.6e-2
    assert (lse.double() - reference_lse(q, k, causal)).abs().max().item() <= lse_bound(q.dtype)


@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
def test_causal_heads_in_uneven_groups(head_dim):
    """The sm_80 kernel takes a causal launch's heads in groups (csrc/block_order.h): on an H100
    (the sm_80 and L4-emulation suites), 67 heads of 2048 keys make two groups of 34 and 33
    heads, and the smaller group's spare grid column must compute nothing."""
    q, k, v = (
        torch.randn(1, 67, 2048, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3)
    )
    out, lse = run_poisoned(q, k, v, causal=True)
    assert_close_to_reference(q, k, v, True, out, lse)


# Grouped-query attention (k/v with H / group heads): the grid, h_q / h_kv in {4, 8}
# over odd lengths, on every path (the L4 and sm_80 suites run it again, OTHER_PATH_SELECTION).
@pytest.mark.parametrize("seqlen", [97, 1025], ids=lambda s: f"s{s}")
@pytest.mark.parametrize("group", [4, 8], ids=lambda g: f"g{g}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_grouped_query_attention(dtype, head_dim, causal, group, seqlen):
    kv_heads = 2
    q = torch.randn(2, kv_heads * group, seqlen, head_dim, device="cuda", dtype=dtype)
    k, v = (
        torch.randn(2, kv_heads, seqlen, head_dim, device="cuda", dtype=dtype) for _ in range(2)
    )
    out, lse = run_poisoned(q, k, v, causal)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    assert_close_to_reference(q, k, v, causal, out, lse)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_multi_query_and_strided(causal):
    """MQA (one k/v head for 12 query heads, a group that is no power of two) with k and v as
    views of a packed (B, S, 2, H_kv, D) projection, and fewer queries than keys (every causal
    row sees a key: test_causal_rows_without_keys_are_zero covers the others)."""
    q = torch.randn(2, 12, 257, 128, device="cuda", dtype=torch.bfloat16)
    packed = torch.randn(2, 300, 2, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (packed[:, :, i].transpose(1, 2) for i in range(2))
    assert not k.is_contiguous()
    out, lse = run_poisoned(q, k, v, causal)
    assert_close_to_reference(q, k, v, causal, out, lse)


def test_grouped_query_needs_a_whole_multiple_of_kv_heads():
    from kernels.flash_attention import flash_attention

    q = torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 3, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q has 8 heads and k, v have 3.*h_q % h_kv == 0"):
        flash_attention(q, k, k)


def test_causal_rows_without_keys_are_zero():
    """With S_q > S_k and bottom-right alignment, the first S_q - S_k rows see no key."""
    q = torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(1, 2, 50, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    out, lse = run_poisoned(q, k, v, causal=True)
    assert (out[:, :, :150] == 0).all() and (lse[:, :, :150] == float("-inf")).all()
    ref = reference_attention(q, k, v, True)[:, :, 150:]
    assert rel_l2(out[:, :, 150:], ref) <= 2e-3


# Every finite scale is valid, as in SDPA: a negative one prefers the least similar keys, zero
# averages the visible values, a tiny one is within rounding of zero. The running max must be
# taken over scaled scores for these (issue: the max over raw scores gave all-NaN outputs).
SCALES = [0.3, 2.0, -0.125, -1.0, 0.0, 1e-30, -1e-30, 1e-42]
SCALE_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("scale", SCALES, ids=lambda x: f"scale{x:g}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_any_finite_scale(dtype, head_dim, causal, scale):
    q, k, v = (torch.randn(2, 3, 257, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    out, lse = run_poisoned(q, k, v, causal, scale=scale)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    ref = reference_attention(q, k, v, causal, scale=scale)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    err_ours, err_sdpa = rel_l2(out, ref), rel_l2(sdpa, ref)
    # Should an SDPA backend not cope with this scale, hold ours to the dtype's usual bound.
    bound = 2 * err_sdpa + 1e-5 if math.isfinite(err_sdpa) else SCALE_TOLERANCE[dtype]
    assert err_ours <= bound, f"rel L2 {err_ours:.3e} vs SDPA {err_sdpa:.3e}"
    lse_err = (lse.double() - reference_lse(q, k, causal, scale=scale)).abs().max().item()
    assert lse_err <= lse_bound(dtype), f"lse max abs error {lse_err:.3e}"


@pytest.mark.parametrize("growth", [0.5, 4.0], ids=["slow", "fast"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128], ids=["d64", "d128"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_row_maxima_that_climb_along_the_keys(dtype, head_dim, causal, growth):
    """Keys that grow along the sequence: each row's max climbs tile after tile, in all by
    about 2 (slow) or 17 (fast) base-2 units (scores scaled by 1/sqrt(D): alike at 64 and
    128), under and over the lazy rescale threshold (softmax.h: the sm_80 split-D loop's, and
    the Hopper path's, which the three-consumer D = 64 kernel takes here: non-causal, 2049
    rows). 2049 rows: the L4 build runs split-D for both settings."""
    q, k, v = (torch.randn(2, 3, 2049, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    k = k * (1 + growth * torch.linspace(0, 1, 2049, device="cuda", dtype=dtype))[:, None]
    out, lse = run_poisoned(q, k, v, causal)
    assert_close_to_reference(q, k, v, causal, out, lse)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scale_is_refused(scale):
    from kernels.flash_attention import flash_attention

    q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        flash_attention(q, q, q, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_inside_cuda_graph(dtype):
    from kernels.flash_attention import flash_attention

    shape = (2, 4, 1025, 128)
    static = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)]
    flash_attention(*static, causal=True)  # load the library before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = flash_attention(*static, causal=True)
    for _ in range(2):  # fresh inputs through the same captured graph
        fresh = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)]
        for buf, new in zip(static, fresh, strict=True):
            buf.copy_(new)
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference_attention(*fresh, True)
        sdpa = F.scaled_dot_product_attention(*fresh, is_causal=True)
        assert torch.isfinite(static_out).all()
        assert rel_l2(static_out, ref) <= 2 * rel_l2(sdpa, ref) + 1e-5


def test_under_torch_compile():
    from kernels.flash_attention import flash_attention

    q, k, v = (torch.randn(1, 2, 300, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    compiled = torch.compile(lambda a, b, c: flash_attention(a, b, c, causal=True) * 2.0)
    out = compiled(q, k, v)
    assert rel_l2(out / 2.0, reference_attention(q, k, v, True)) <= 2e-3


def test_backend_name_names_the_unit():
    from kernels.flash_attention import backend_name, build

    q = torch.empty(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    major, minor = torch.cuda.get_device_capability()
    # A switched build keeps the Hopper path unless a switch selects the sm_80 kernel.
    switches = build.parse_defines(os.environ.get(SWITCHES_ENV, "").split())
    sm80_only = any(switches.get(name) for name in build.SM80_SWITCHES)
    hopper = (major, minor) == (9, 0) and not sm80_only
    path = "_sm90" if hopper else ""
    assert backend_name(q, True) == f"flash:fwd_hdim64_bf16_causal{path}:sm_{major}{minor}"
    assert backend_name(q, False) == f"flash:fwd_hdim64_bf16{path}:sm_{major}{minor}"


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: [torch.randn(1, 2, 16, 96, device="cuda", dtype=torch.float16)] * 3,
            "head_dim 96",
        ),
        (lambda: [torch.randn(1, 2, 16, 64, device="cuda")] * 3, "torch.float32"),
        (
            lambda: (
                [
                    torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16)
                    .transpose(2, 3)
                    .contiguous()
                    .transpose(2, 3)
                ]
                * 3
            ),
            "last dim must be contiguous",
        ),
        (
            lambda: [
                torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16),
                torch.randn(1, 3, 16, 64, device="cuda", dtype=torch.float16),
                torch.randn(1, 3, 16, 64, device="cuda", dtype=torch.float16),
            ],
            "whole multiple of the k/v heads",
        ),
        (
            lambda: [
                torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16),
                torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16),
                torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16),
            ],
            "share a dtype",
        ),
    ],
    ids=["head_dim", "float32", "last_dim_stride", "heads_mismatch", "dtype_mismatch"],
)
def test_rejects_bad_inputs_on_gpu(make, message):
    from kernels.flash_attention import flash_attention

    with pytest.raises(ValueError, match=message):
        flash_attention(*make())
