"""Users' kernels in worker processes on a real GPU: the harness's bracket around their
calls in graph and single mode, and a kernel that makes an illegal memory access (its CUDA
context is lost for good) or never finishes costs that config alone."""

from __future__ import annotations

import os
import re
import shutil
import stat
import statistics
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from benches import confinement
from benches.writers import read_csv
from results_schema import Measurement
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


# SDPA in the inputs' own dtype, as the harness's `sdpa` calls it (the trees' default body
# computes in float32, for exactness on the CPU: ~15x slower on the GPU).
NATIVE_SDPA = "return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)\n"


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


# 0.22 and 0.11 ms a call on an H200: issue 49 item 4 holds configs of 0.1 ms or more
AGREEMENT_BATCHES = {"b4": 4, "b2": 2}


def agreement_configs() -> list:
    return [
        config(name, 128).model_copy(
            update={"batch": batch, "heads": 16, "seq_len": 2048, "causal": False}
        )
        for name, batch in AGREEMENT_BATCHES.items()
    ]


def worker_over_parent(run: Path, record_property) -> dict[str, float]:
    """Per config, the worker's median sample over the same SDPA's in the harness's process,
    each row's sample its own report less at most OWN_OFFSET_MAX_FRACTION (the offset);
    junit.xml records the ratios and offsets, pass or fail."""
    from benches.bracket import OWN_OFFSET_MAX_FRACTION

    rows = read_csv(run / "results" / "measurements.csv", Measurement)
    ratios = {}
    for name in AGREEMENT_BATCHES:
        fine = [r for r in rows if r.config == name and r.implementation == "fine"]
        assert fine and all(r.harness_ms is not None for r in fine)
        assert all(
            0 <= r.reported_ms - r.latency_ms <= OWN_OFFSET_MAX_FRACTION * r.reported_ms
            for r in fine
        )
        worker = statistics.median(r.latency_ms for r in fine)
        sdpa = statistics.median(
            r.latency_ms for r in rows if r.config == name and r.implementation == "sdpa"
        )
        ratios[name] = worker / sdpa
        offset_us = statistics.median(r.reported_ms - r.latency_ms for r in fine) * 1e3
        record_property(f"worker_over_sdpa_{name}", ratios[name])
        record_property(f"offset_us_{name}", offset_us)
    return ratios


def test_a_gpu_workers_sample_is_its_own_time_held_by_the_harnesss_bracket(
    tmp_path, registered, record_property
):
    """On the GPU a worker's sample is its own events' time, which the harness's bracket
    holds (isolation.GPU_REPORT_ALLOWANCE_MS says why not the bracket), less what a
    worker's own events add (brackets.OWN_OFFSET_WINDOW): for SDPA called in a worker, that
    time agrees with the same SDPA timed in the harness's process, every row records the
    worker's own figure and the harness's beside it, and every timed call was checked
    where the harness read it."""
    kernel_tree(tmp_path, "fine", NATIVE_SDPA)
    plan = gpu_plan([gpu_kernel("fine", "fine")], agreement_configs(), samples=30)
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    assert all(r.passed for r in checks), [r.message for r in checks if not r.passed]
    assert any(r.implementation == "fine" and "timed calls checked" in r.message for r in checks)
    ratios = worker_over_parent(tmp_path / "run", record_property)
    # the same SDPA in the parent: within 1 % (issue 49 item 4, configs of 0.1 ms or more)
    assert all(abs(ratio - 1) <= 0.01 for ratio in ratios.values()), ratios


def test_a_kernel_that_never_finishes_on_the_gpu_is_ended_and_the_run_goes_on(tmp_path, registered):
    """A worker whose call never finishes on the GPU: the parent's stream waits on the
    worker's done counter, which the worker never writes; at the call's bound the parent
    writes it itself from a side stream (shared_buffers.DoneCounter.force), ends the worker,
    and times the next config with a fresh one."""
    marker = tmp_path / "timing-started"
    body = (
        f"if q.shape[-1] == 16 and os.path.exists({str(marker)!r}):\n"
        "    import torch\n"
        "    torch.cuda._sleep(1 << 42)  # hours of spinning on the GPU\n"
    )
    kernel_tree(tmp_path, "spins", body)
    kernel = gpu_kernel("spins", "spins", call_timeout="20s")
    plan = gpu_plan([kernel], [config("d16", 16), config("d64", 64)], samples=8)
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run", between=marker.touch)
    lost = [r for r in checks if r.stage == "timing"]
    assert [(r.config, r.implementation) for r in lost] == [("d16", "spins")], lost
    assert "hung" in lost[0].message, lost[0].message
    counts = {(r.config, r.implementation): r.n for r in summary}
    assert counts[("d64", "spins")] == plan.samples_per_config
    assert counts[("d16", "sdpa")] == plan.samples_per_config


def _world_readable(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root")
def test_a_worker_dropped_to_its_trees_user_is_timed_and_checked_as_before(
    registered, record_property
):
    """On a run that confines kernels (benches/confinement.py) the worker is another user
    than the harness: the lent buffers, the go and done counters and its outputs still
    cross (CUDA IPC memory between users; no event does, so the bracket waits on counters,
    benches/bracket.py), and its calls are timed and checked as any worker's, its samples
    within 1 % of the same SDPA in the harness's process."""
    payload = Path(__file__).resolve().parents[2]
    if not _world_readable(payload):
        pytest.skip(f"the payload {payload} is not readable by another user here")
    user = "bench-gputest"
    if subprocess.run(["id", user], capture_output=True).returncode:
        subprocess.run(["useradd", "--system", "--no-create-home", user], check=True)
    root = Path(tempfile.mkdtemp(prefix="bench-confined-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        kernel_tree(root, "fine", NATIVE_SDPA)
        (root / "fine.home").mkdir()
        shutil.chown(root / "fine.home", user)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        plan = gpu_plan([gpu_kernel("fine", "fine")], agreement_configs(), samples=30)
        os.environ[confinement.KERNEL_USERS_ENV] = f"fine={user}"
        try:
            registered(plan, root)
            checks, summary = run_whole(plan, root / "run")
        finally:
            os.environ.pop(confinement.KERNEL_USERS_ENV, None)
        assert all(r.passed for r in checks), [r.message for r in checks if not r.passed]
        counts = {(r.config, r.implementation): r.n for r in summary}
        assert all(counts[(name, "fine")] == plan.samples_per_config for name in AGREEMENT_BATCHES)
        ratios = worker_over_parent(root / "run", record_property)
        assert all(abs(ratio - 1) <= 0.01 for ratio in ratios.values()), ratios
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_lent_buffer_holds_its_copy_before_the_worker_can_see_it():
    """The worker reads a lent buffer from another process, which no stream of the parent's
    orders: `lend` returns only once the copy is done, however busy the parent's stream
    (queued behind the parent's float64 reference, a copy reached the worker half done and
    our kernel failed its graph probe on 5 of the default plan's 13 configs)."""
    from benches.shared_buffers import Lender

    device = torch.device("cuda")
    lender = Lender(device)
    source = torch.randn(64, 1024, 1024, device=device)
    torch.cuda._sleep(200_000_000)  # about 0.1 s of the stream's time ahead of the copy
    lent = lender.lend(source)
    try:
        assert torch.cuda.current_stream().query(), "lend returned with its copy still queued"
        assert torch.equal(lent.tensor, source)
    finally:
        lent.free()
        lender.close()


def test_a_kernel_that_synchronizes_inside_its_call_is_judged_not_hung(
    tmp_path, registered, capsys
):
    """A worker's call is asked for before the bracket starts and waits on the GPU for the
    parent's go (benches/bracket.py): a kernel that synchronizes inside its call cannot
    reply until the go comes. The parent waits for the reply a bounded while, then starts
    its bracket and releases the call anyway, and takes such a sample again; the run goes
    on to its end. (The first version of this bracket waited for the reply without bound:
    the harness's own calibration worker hung at its first timed call, H200, 2026-11-30.)
    Such a kernel's brackets hold its host's sync and the parent's reading of its reply,
    which its own events do not: the own-time rule refuses it, naming both figures
    (0.52 ms reported, 0.97 measured, an H200), as it refused it behind a spin."""
    syncs = "import torch\nif not torch.cuda.is_current_stream_capturing():\n"
    syncs += "    torch.cuda.synchronize()\n"  # a graph's capture refuses a sync: the gate's probe
    kernel_tree(tmp_path, "syncs", syncs + NATIVE_SDPA)
    plan = gpu_plan([gpu_kernel("syncs", "syncs")], agreement_configs(), samples=12)
    registered(plan, tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    mine = [r for r in checks if r.implementation == "syncs"]
    assert all(r.passed or "harness measured" in r.message for r in mine), mine
    counts = {(r.config, r.implementation): r.n for r in summary}
    assert all(counts[(c.name, "sdpa")] == plan.samples_per_config for c in plan.configs)
    found = re.search(r"(\d+) around a worker's call", capsys.readouterr().err)
    assert found and int(found.group(1)) > 0, "no sample of the syncing kernel came late"


def test_an_fp8_kernel_in_its_worker_is_gated_and_timed_with_its_descales(tmp_path, registered):
    """FP8 through the worker on the GPU: the descales lent beside the e4m3 inputs (CUDA IPC
    of float8 and float32 buffers), fresh e4m3 queries made from a seed in both processes,
    the bfloat16 outputs read where they lie, in graph and single mode."""
    from tests.unit.test_fp8_gate import FP8_KERNEL

    tree = tmp_path / "eight"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "ops.py").write_text(FP8_KERNEL)
    kernel = gpu_kernel("eight", "eight")
    supports = kernel.contract.supports.model_copy(
        update={"dtypes": ["float8_e4m3fn"], "gqa": True}
    )
    kernel = kernel.model_copy(
        update={"contract": kernel.contract.model_copy(update={"supports": supports})}
    )
    small = config("small", 64)
    large = config("large", 64).model_copy(update={"batch": 2, "heads": 8, "seq_len": 1024})
    plan = gpu_plan([kernel], [small, large])
    fp8_configs = [c.model_copy(update={"dtype": "float8_e4m3fn"}) for c in plan.configs]
    plan = registered(plan.model_copy(update={"configs": fp8_configs}), tmp_path)

    checks, summary = run_whole(plan, tmp_path / "run")
    mine = [r for r in checks if r.implementation == "eight"]
    assert mine and all(r.passed for r in mine), [r.message for r in mine]
    rows = {(r.config, r.implementation): r for r in summary}
    assert {rows[(c, "eight")].n for c in ("small", "large")} == {plan.samples_per_config}
    assert ("small", "sdpa") not in rows  # SDPA's FP8 rows are "unsupported": never timed


def test_the_calibrations_in_process_samples_are_taken_once_per_kept_placement():
    """A block's calibration brackets the known call afresh (the bracket drifts between
    blocks) but takes its in-process samples once per kept placement: they hold no worker
    and no handshake (benches/isolation.py CalibrationSamples). A new config takes them
    again."""
    from benches import bracket as brackets
    from benches import timing
    from benches.isolation import CalibrationSamples, calibration_worker

    device = torch.device("cuda")
    bracket = brackets.CudaBracket(timing.CudaClock(device, flush_l2=True))
    taken = []
    own_time_call = bracket.clock.time_call
    bracket.clock.time_call = lambda fn: taken.append(fn) or own_time_call(fn)
    worker = calibration_worker(device, flush_l2=True, gated=False)
    samples = CalibrationSamples(worker, bracket, secret=20261129)
    fp16 = {"dtype": "float16", "seq_len": 256}
    first = config("once", 64).model_copy(update=fp16)
    try:
        known = samples(first, "single", 1)
        at_first_block = len(taken)
        assert len(known.in_process) == brackets.CALIBRATION_SAMPLES
        assert len(known.own) == len(known.bracketed)  # the known call's own events too
        again = samples(first, "single", 1)
        assert len(taken) == at_first_block  # no in-process sample at the second block
        assert again.in_process == known.in_process
        assert len(again.bracketed) == len(again.own) == brackets.CALIBRATION_SAMPLES_KEPT
        assert min(again.bracketed) > statistics.median(known.in_process)  # it holds more
        samples(config("again", 64).model_copy(update=fp16), "single", 1)
        assert len(taken) == 2 * at_first_block  # a new config's placement: taken again
    finally:
        samples.close()
        worker.close()


# One thread a query row, keys streamed through an online softmax in float32: slow on
# purpose. Its causal rows end at different keys, the shape of kernel that an L2 left full of
# another process's lines slowed (see the test below).
ROW_KERNEL_CU = r"""
#include <cuda_fp16.h>
#include <math.h>

__global__ void rows(const __half* q, const __half* k, const __half* v, __half* o, int seq,
                     int dim, float scale, int causal) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= seq) return;
  const long head = blockIdx.y;
  const __half* qr = q + (head * seq + row) * dim;
  const __half* keys = k + head * seq * dim;
  const __half* values = v + head * seq * dim;
  float acc[128];
  for (int d = 0; d < dim; ++d) acc[d] = 0.f;
  float top = -INFINITY, sum = 0.f;
  const int last = causal ? row + 1 : seq;
  for (int j = 0; j < last; ++j) {
    float s = 0.f;
    for (int d = 0; d < dim; ++d) s += __half2float(qr[d]) * __half2float(keys[j * dim + d]);
    s *= scale;
    const float next = fmaxf(top, s), shrink = __expf(top - next), p = __expf(s - next);
    sum = sum * shrink + p;
    for (int d = 0; d < dim; ++d) acc[d] = acc[d] * shrink + p * __half2float(values[j * dim + d]);
    top = next;
  }
  __half* out = o + (head * seq + row) * dim;
  for (int d = 0; d < dim; ++d) out[d] = __float2half(acc[d] / sum);
}

extern "C" int row_attention(const void* q, const void* k, const void* v, void* o, int heads,
                             int seq, int dim, float scale, int causal, void* stream) {
  const dim3 grid((seq + 127) / 128, heads);
  rows<<<grid, 128, 0, (cudaStream_t)stream>>>((const __half*)q, (const __half*)k,
                                               (const __half*)v, (__half*)o, seq, dim, scale,
                                               causal);
  return (int)cudaGetLastError();
}
"""

ROW_KERNEL_BODY = """\
import ctypes
import torch
lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "librows.so"))
lib.row_attention.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [
    ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
q, k, v = (t.contiguous() for t in (q, k, v))
out = torch.empty_like(q)
failed = lib.row_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                           q.shape[0] * q.shape[1], q.shape[2], q.shape[3], scale, int(causal),
                           torch.cuda.current_stream().cuda_stream)
if failed:
    raise RuntimeError(f"row_attention: CUDA error {failed}")
return out
"""


def _built_row_kernel(folder: Path) -> Path:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    major, minor = torch.cuda.get_device_capability()
    (folder / "rows.cu").write_text(ROW_KERNEL_CU)
    library = folder / "librows.so"
    subprocess.run(
        [
            nvcc,
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            f"-arch=sm_{major}{minor}",
            "-o",
            str(library),
            str(folder / "rows.cu"),
        ],
        check=True,
    )
    return library


def test_a_kernel_in_its_worker_runs_as_fast_as_alone_after_the_harnesss_flush(
    tmp_path, registered, record_property
):
    """The worker flushes the L2 again after the harness's go (benches/worker.py,
    `Placement.call`). Without it, cuda-extension's naive kernel at fp16 2 x 16 x 4096 x 64
    causal ran 128.0 ms a call in its worker and 121.0 ms alone: an L2 left full of the
    lines the harness's flush wrote slowed it (H200, 2026-11-30). The same kind of kernel,
    built here, timed through its worker, agrees within 1 % with its own call timed in this
    process, flushed by this process, as benches/timing.CudaClock times a call."""
    tree = kernel_tree(tmp_path, "rows", ROW_KERNEL_BODY)
    library = _built_row_kernel(tree / "pkg")
    shape = config("long", 64).model_copy(
        update={"batch": 2, "heads": 16, "seq_len": 4096, "causal": True}
    )
    plan = gpu_plan([gpu_kernel("rows", "rows")], [shape], samples=8)
    registered(plan, tmp_path)

    checks, _ = run_whole(plan, tmp_path / "run")
    assert all(r.passed for r in checks), [r.message for r in checks if not r.passed]
    rows = read_csv(tmp_path / "run" / "results" / "measurements.csv", Measurement)
    worker = statistics.median(r.latency_ms for r in rows if r.implementation == "rows")

    import ctypes

    from benches import timing

    lib = ctypes.CDLL(str(library))
    lib.row_attention.argtypes = (
        [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
    )
    q, k, v = (torch.randn(2, 16, 4096, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    flush = timing.l2_flush_buffer(q.device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    alone = []
    for _ in range(8):
        flush.zero_()
        start.record()
        lib.row_attention(
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            out.data_ptr(),
            32,
            4096,
            64,
            0.125,
            1,
            torch.cuda.current_stream().cuda_stream,
        )
        end.record()
        end.synchronize()
        alone.append(start.elapsed_time(end))
    ratio = worker / statistics.median(alone)
    record_property("worker_over_alone", ratio)
    assert abs(ratio - 1) <= 0.01, (worker, statistics.median(alone))
