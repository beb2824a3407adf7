#!/usr/bin/env bash
# One device call comparing kernel variants: build, the GPU tests (default selection and L4
# emulation, in parallel), devbench per variant, then a ratio table (last).
# Usage (repo root, on the GPU machine):
#   [BASELINES="v5=dir ..."] [L4_BASELINES="label=dir ..."] [WARPS8=dir] \
#     bash kernels/flash_attention/devcompare.sh [devbench args]
# BASELINES: label=directory pairs, each directory holding another copy of kernels/ to
# measure in the same call as this tree; L4_BASELINES: the same, measured under L4 emulation.
# WARPS8: such a directory whose 8-warp path (FLASH_ATTENTION_WARPS=8, v5's choice for the
# L4) is measured as "v5-warps8". L4 emulation: BENCH_FLASH_SMEM_PER_SM=102400 (NOTES.md).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/flash-out}
mkdir -p "$OUT"
export BENCH_KERNEL_CACHE=/tmp/flash-cache
L4_SMEM=102400  # the L4's shared memory per SM (sm_89: 100 KB)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv | tee "$OUT/gpu.txt"
python3 -m kernels.flash_attention.build >/dev/null || exit 1
for pair in ${BASELINES:-} ${L4_BASELINES:-}; do
  (cd "${pair#*=}" && python3 -m kernels.flash_attention.build >/dev/null) || exit 1
done

python3 -m pytest tests/gpu/test_flash_correctness.py -q --noconftest -p no:cacheprovider \
  > "$OUT/pytest-default.log" 2>&1 &
BENCH_FLASH_SMEM_PER_SM=$L4_SMEM python3 -m pytest tests/gpu/test_flash_correctness.py -q \
  --noconftest -p no:cacheprovider > "$OUT/pytest-l4.log" 2>&1 &
wait
for name in default l4; do
  echo "pytest [$name]: $(grep -E 'passed|failed' "$OUT/pytest-$name.log" | tail -1)"
  grep -E "^FAILED" "$OUT/pytest-$name.log" | head -5
done

ORDER=()
bench() {  # label, env..., then devbench's own arguments after --
  local label=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" python3 -m kernels.flash_attention.devbench --json "$OUT/bench-$label.json" \
    "$@" > "$OUT/bench-$label.log" 2>&1 || echo "bench $label failed"
}
PAIR=--impls=flash,sdpa-flash
L4ENV=BENCH_FLASH_SMEM_PER_SM=$L4_SMEM
for pair in ${BASELINES:-}; do
  (cd "${pair#*=}" && bench "${pair%%=*}" -- "$@"); ORDER+=("${pair%%=*}")
done
bench new -- "$@"; ORDER+=(new)
if [[ -n "${WARPS8:-}" ]]; then
  (cd "$WARPS8" && bench v5-warps8 FLASH_ATTENTION_WARPS=8 -- $PAIR "$@"); ORDER+=(v5-warps8)
fi
bench l4 $L4ENV -- $PAIR "$@"; ORDER+=(l4)
for pair in ${L4_BASELINES:-}; do
  (cd "${pair#*=}" && bench "${pair%%=*}" $L4ENV -- $PAIR "$@"); ORDER+=("${pair%%=*}")
done
grep -h "blocks/SM" "$OUT"/bench-*.log | sort -u

python3 - "$OUT" "${ORDER[@]}" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out, labels = Path(sys.argv[1]), sys.argv[2:]
runs = {l: json.loads((out / f"bench-{l}.json").read_text())["rows"] for l in labels
        if (out / f"bench-{l}.json").is_file()}
labels = [l for l in labels if l in runs]
key = lambda r: (r["dtype"], r["D"], r["causal"], r["S"])
table = {l: {key(r): r for r in rows} for l, rows in runs.items()}
print("ours/sdpa-flash (each run against its own sdpa-flash); new/sdpa: vs SDPA's default (cuDNN)")
print(f"{'dtype':9}{'D':>4}{'causal':>7}{'S':>6}" + "".join(f"{l:>10}" for l in labels)
      + f"{'new/sdpa':>10}")
for k in table[labels[0]]:
    cells = "".join(f"{table[l].get(k, {}).get('vs_flash', '-'):>10}" for l in labels)
    cudnn = table.get("new", {}).get(k, {}).get("vs_sdpa", "-")
    print(f"{k[0]:9}{k[1]:>4}{k[2]!s:>7}{k[3]:>6}{cells}{cudnn:>10}")
for l in labels:
    vals = [r["vs_flash"] for r in runs[l]]
    med = statistics.median(vals)
    print(f"{l:>10}: median {med:.2f}, min {min(vals):.2f}, max {max(vals):.2f}")
PYEOF
