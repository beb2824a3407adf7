#!/usr/bin/env bash
# On the H200 (the device tool), from the repository root, with .whl/ (pydantic and
# platformdirs) and .whl-cudnn/ (the nvidia-cudnn-frontend wheel) carried (issue 53 item 1):
#  1. installs both into /tmp/site without dependencies (the frontend needs only the cuDNN
#     torch ships; its own CuTe DSL engines, which would need nvidia-cutlass-dsl, are not
#     timed: docs/peers.md);
#  2. runs the cudnn-fe GPU tests (tests/gpu/test_cudnn_fe_gpu.py) while our kernel's library
#     builds in the background (nvcc on the CPU);
#  3. prints one table, all in one process: TFLOP/s (4·b·hq·s²·d, halved for causal) of
#     cudnn-fe (BSHD memory, as NVIDIA's samples lay it out, and BHSD), SDPA pinned to cuDNN
#     (BHSD, as the harness hands it), and our kernel (BHSD), bf16, S = 16k, batch 2; each
#     cell the median of ITERS calls timed with CUDA events after WARMUP calls (the first of
#     which builds cudnn-fe's graph).
# Writes pytest.txt, table.txt, table.json and flash-build.log under $OUT. About 2-3 minutes.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/cudnn-fe-device}
site=${SITE:-/tmp/site}
mkdir -p "$out" "$site"
cd "$repo" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
  .whl/*.whl .whl-cudnn/*.whl 2>&1 | tail -n 3
export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1
export FLASH_KERNEL_CACHE=${FLASH_KERNEL_CACHE:-/tmp/flash-kernel-cache}

(timeout 150 python3 -m kernels.flash_attention.build > "$out/flash-build.log" 2>&1
 echo "build exit $?" >> "$out/flash-build.log") &
build=$!

python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cudnn_fe_gpu.py 2>&1 \
  | tee "$out/pytest.txt" | tail -n 20
wait "$build"
tail -n 1 "$out/flash-build.log"
# Our kernel is timed only when its library built (a first call would build it again).
grep -q '^build exit 0$' "$out/flash-build.log" && export CUDNN_FE_OURS=1

python3 - "$out" <<'TABLE' 2>&1 | tee "$out/table.txt"
import json
import os
import statistics
import sys
from importlib import metadata

import torch

from benches import peers, registry

out_dir = sys.argv[1]
WARMUP, ITERS = 5, 50
SEQ, BATCH = 16384, 2
# (label, q heads, k/v heads, head dim, causal): GQA 64/8 as the published cuDNN record;
# MHA at a model width of 2048 (16 heads at D = 128, 32 at 64, 8 at 256).
CASES = [
    ("gqa64/8 d128", 64, 8, 128, False),
    ("gqa64/8 d128 causal", 64, 8, 128, True),
    ("mha16 d128", 16, 16, 128, False),
    ("mha16 d128 causal", 16, 16, 128, True),
    ("mha32 d64", 32, 32, 64, False),
    ("mha32 d64 causal", 32, 32, 64, True),
    ("mha8 d256", 8, 8, 256, False),
    ("mha8 d256 causal", 8, 8, 256, True),
]

cudnn = peers.load(peers.PEERS["cudnn-fe"])
fe = registry.get("cudnn-fe")
print(
    f"{torch.cuda.get_device_name()} | torch {torch.__version__}, its cuDNN "
    f"{peers.cudnn_version_string(torch.backends.cudnn.version())} | "
    f"nvidia-cudnn-frontend {metadata.version('nvidia-cudnn-frontend')}, its cuDNN "
    f"{peers.cudnn_library_version()} | bf16, S={SEQ}, batch {BATCH}, median of {ITERS}"
)
flash_attention, ours_error = None, "its library did not build (flash-build.log)"
if os.environ.get("CUDNN_FE_OURS") == "1":
    try:
        from kernels.flash_attention.api import flash_attention

        ours_error = None
    except Exception as error:
        ours_error = peers.one_line(error)


def median_ms(fn) -> float:
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(ITERS)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def calls_for(q, k, v, causal) -> dict:
    """Each implementation's call on this case's inputs, made before any timing."""
    bshd = fe.native_inputs((q, k, v))  # [B, S, H, D] copies, as the harness makes them
    bhsd = tuple(t.transpose(1, 2) for t in (q, k, v))  # [B, S, H, D] views of BHSD memory
    calls = {
        "cudnn-fe bshd": lambda: fe.run(*bshd, causal),
        "cudnn-fe bhsd": lambda: fe.run(*bhsd, causal),
        "sdpa-cudnn": lambda: registry.get("sdpa-cudnn").run(q, k, v, causal),
    }
    if flash_attention is not None:
        calls["ours"] = lambda: flash_attention(q, k, v, causal=causal)
    return calls, bshd


rows, names = [], ["cudnn-fe bshd", "cudnn-fe bhsd", "sdpa-cudnn", "ours"]
print(f"{'case':22}" + "".join(f"{n:>15}" for n in names) + "   fe/sdpa  ours/best-cudnn")
for label, hq, hk, d, causal in CASES:
    torch.manual_seed(0)
    q = torch.randn(BATCH, hq, SEQ, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(BATCH, hk, SEQ, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(BATCH, hk, SEQ, d, device="cuda", dtype=torch.bfloat16)
    flop = 4 * BATCH * hq * SEQ * SEQ * d / (2 if causal else 1)
    calls, bshd = calls_for(q, k, v, causal)
    row = {"case": label, "hq": hq, "hk": hk, "d": d, "causal": causal, "tflops": {},
           "errors": {}}
    for name, fn in calls.items():
        try:
            row["tflops"][name] = flop / (median_ms(fn) * 1e-3) / 1e12
        except Exception as error:
            row["errors"][name] = peers.one_line(error)
    row["cudnn_fe_backend"] = fe.backend_for(*bshd, causal)
    tf = row["tflops"]
    cells = "".join(f"{tf[n]:>15.1f}" if n in tf else f"{'-':>15}" for n in names)
    best = max((tf[n] for n in names[:3] if n in tf), default=None)
    fe_best = max((tf[n] for n in names[:2] if n in tf), default=None)
    ratio = f"{fe_best / tf['sdpa-cudnn']:9.3f}" if fe_best and "sdpa-cudnn" in tf else " " * 9
    ours = f"{tf['ours'] / best:17.3f}" if best and "ours" in tf else ""
    print(f"{label:22}{cells}{ratio}{ours}")
    rows.append(row)
    del q, k, v, bshd, calls
    torch.cuda.empty_cache()

for row in rows:
    for name, error in row["errors"].items():
        print(f"{row['case']}: {name} failed: {error}")
if ours_error:
    print(f"ours: not timed ({ours_error})")
print("cudnn-fe rows:", sorted({row["cudnn_fe_backend"] for row in rows}))
with open(f"{out_dir}/table.json", "w") as handle:
    json.dump({"seq": SEQ, "batch": BATCH, "iters": ITERS, "rows": rows}, handle, indent=1)
TABLE
