#!/usr/bin/env bash
# One device call: cold/warm/4-core builds, smoke test, GPU tests, benchmark table (last).
# Usage (repo root, on the GPU machine): bash kernels/flash_attention/devrun.sh [bench args]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/flash-out}
mkdir -p "$OUT"
PY=python3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv | tee "$OUT/gpu.txt"
export BENCH_KERNEL_CACHE=/tmp/flash-cache
rm -rf /tmp/flash-cache /tmp/flash-cache4
$PY -m kernels.flash_attention.build --record "$OUT/build_cold.json" >/dev/null || exit 1
$PY - <<'PYEOF'
import time
t = time.perf_counter()
from kernels.flash_attention import build
import ctypes
rec = build.build(); ctypes.CDLL(rec["library"])
print(f"warm cached load: {time.perf_counter() - t:.3f} s (cached={rec['cached']})")
PYEOF
BENCH_KERNEL_CACHE=/tmp/flash-cache4 taskset -c 0-3 $PY -m kernels.flash_attention.build \
  --record "$OUT/build_4core.json" >/dev/null
$PY - "$OUT" <<'PYEOF'
import json, sys
for name in ("build_cold", "build_4core"):
    r = json.load(open(f"{sys.argv[1]}/{name}.json"))
    units = " ".join(f"{k.removeprefix('fwd_')}={v:.1f}" for k, v in r["unit_seconds"].items())
    print(f"{name}: {r['seconds']:.1f} s total; {units}")
PYEOF
$PY -m kernels.flash_attention.build --check || echo "SMOKE FAILED"
$PY -m pytest tests/gpu/test_flash_correctness.py -q --noconftest -p no:cacheprovider ${PYTEST_ARGS:-} \
  > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/pytest.log" | tail -25
$PY -m kernels.flash_attention.devbench --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" | tail -50
