#!/usr/bin/env bash
# Issue 34 item 1 (the Hopper path against cuDNN): candidate builds (switches of csrc/switches.h)
# checked on tail shapes, then timed against the shipped code, sdpa-cudnn and sdpa-flash in one
# process (ab.py), table last. A candidate that fails its tail shapes is not timed.
# Usage (repo root, GPU machine):
#   [BUILDS="shipped= wg3=FLASH_SM90_SHAPE_D64=2 ..."] \
#   [STEPS=prebuild,tails,memcheck,ab,test,sass,ncu] [TAILS="NAME ..."] [MEMCHECK="NAME ..."] \
#   [TEST_BUILD=NAME] [PEERS=sdpa-cudnn,sdpa-flash] [AB_TIMEOUT=280] \
#   [NCU_CASES="d128nc:--head-dim 128 --seqlen 8192;..."] [PACK=1] \
#   bash tools/flash_attention/item1.sh [ab.py args]
# prebuild: every switch build compiled at once (several builds fill the cores better than one
# after another). sass: sass_counts.py over the build cache. ncu: per case NAME:ARGS (ncu_one.py
# arguments), one launch of ours under Nsight Compute with warp-state sampling per instruction
# (no clock control: the card's clocks are left alone); the report and its SASS source page as
# CSV under $OUT. Logs under $OUT; PACK=1 packs them into one archive (the device returns at
# most 8 files), the table (table.txt) beside it and printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD FLASH_KERNEL_CACHE=/tmp/flash-cache-item1
# The flag ab.py builds with (several builds in one process), set for every build here: the
# cache key does not see it, and ab.py reuses the libraries the tail checks built.
export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} -Xcompiler=-fno-gnu-unique"
OUT=${OUT:-/tmp/flash-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tails,memcheck,ab}
BUILDS=${BUILDS:-shipped=}
MEMCHECK=${MEMCHECK:-}
TAILS=${TAILS-all}  # the builds whose tail shapes are checked ("all": every one)
TEST_BUILD=${TEST_BUILD:-}
PEERS=${PEERS:-sdpa-cudnn,sdpa-flash}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
switches_of() {  # NAME -> its switches, comma separated
  local pair
  for pair in $BUILDS; do [[ ${pair%%=*} == "$1" ]] && echo "${pair#*=}"; done
}
define_args() {  # "A=1,B=2" -> --define A=1 --define B=2
  local item
  IFS=',' read -ra items <<< "$1"
  for item in "${items[@]}"; do [[ -n $item ]] && printf -- '--define %s ' "$item"; done
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv,noheader | tee "$OUT/gpu.txt"
if has prebuild; then
  for pair in $BUILDS; do
    [[ ${pair%%=*} == *@* ]] && continue
    read -ra defs <<< "$(define_args "${pair#*=}")"
    python3 -m kernels.flash_attention.build "${defs[@]}" > "$OUT/build-${pair%%=*}.log" 2>&1 &
  done
  wait
  echo "prebuild: $(grep -l -i error "$OUT"/build-*.log | tr '\n' ' ')done"
fi
kept=()
for pair in $BUILDS; do
  name=${pair%%=*}
  # NAME@DIR (another tree) is not checked here.
  if has tails && [[ $name != *@* ]] && [[ $TAILS == all || " $TAILS " == *" $name "* ]]; then
    read -ra defs <<< "$(define_args "${pair#*=}")"
    timeout 90 python3 tools/flash_attention/tails.py "${defs[@]}" > "$OUT/tails-$name.log" 2>&1
    rc=$?
    echo "tails [$name]: rc=$rc $(tail -1 "$OUT/tails-$name.log")"
    grep -E "^BAD" "$OUT/tails-$name.log" | head -5
    ((rc == 0)) || continue
  fi
  kept+=(--build "$pair")
done
if has memcheck; then
  for name in $MEMCHECK; do
    read -ra defs <<< "$(define_args "$(switches_of "$name")")"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck \
      python3 tools/flash_attention/tails.py "${defs[@]}" > "$OUT/memcheck-$name.log" 2>&1
    echo "memcheck [$name]: rc=$? $(grep -E 'ERROR SUMMARY|tails:' "$OUT/memcheck-$name.log" | tr '\n' ' ')"
  done
fi
if has test && [[ -n $TEST_BUILD ]]; then
  switches=$(switches_of "$TEST_BUILD")
  FLASH_TEST_SWITCHES="${switches//,/ }" timeout 240 python3 -m pytest \
    tests/gpu/test_flash_correctness.py -q --noconftest -p no:cacheprovider -W ignore -x \
    > "$OUT/pytest-$TEST_BUILD.log" 2>&1
  echo "test [$TEST_BUILD]: rc=$? $(tail -1 "$OUT/pytest-$TEST_BUILD.log")"
fi
if has ab && ((${#kept[@]})); then
  timeout "${AB_TIMEOUT:-280}" python3 tools/flash_attention/ab.py "${kept[@]}" --no-l4 \
    --peers "$PEERS" --head-dims 64,128 --causal both \
    --seqlens 1024,2048,4096,8192,16384 --json "$OUT/ab.json" "$@" > "$OUT/ab.log" 2>&1
  echo "ab: rc=$?"
  grep -E "Error|error|off the reference" "$OUT/ab.log" | tail -5
  # Per build: ratio to cuDNN and to the first build per cell (dtype, D, c = causal, S), then
  # the acceptance's figures, last.
  python3 tools/flash_attention/ab_table.py "$OUT/ab.json" vs_cudnn > "$OUT/table.txt"
  python3 - "$OUT/ab.json" >> "$OUT/table.txt" <<'PYEOF'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["rows"]
names = [k for k, v in rows[0].items() if isinstance(v, dict) and k != "peer_kernels"]
for n in names:
    grid = [r[n]["vs_cudnn"] for r in rows if r["D"] in (64, 128)]
    d64 = [r[n]["vs_cudnn"] for r in rows if r["D"] == 64]
    nc = [r[n]["vs_cudnn"] for r in rows if r["D"] == 128 and not r["causal"] and r["S"] >= 4096]
    print(f"{n:>16}: D64+128 median {statistics.median(grid):.3f} min {min(grid):.3f}"
          f" ({sum(v < 0.9 for v in grid)} < 0.90); D64 median"
          f" {statistics.median(d64) if d64 else float('nan'):.3f};"
          f" D128 nc S>=4096 " + " ".join(f"{v:.3f}" for v in nc)
          + f"; vs first median {statistics.median(r[n]['vs_base'] for r in rows):.3f}")
PYEOF
fi
if has sass; then
  python3 tools/flash_attention/sass_counts.py "$FLASH_KERNEL_CACHE" > "$OUT/sass.log" 2>&1
  echo "sass: rc=$?"
fi
if has ncu; then
  IFS=';' read -ra cases <<< "${NCU_CASES:-d128nc:--head-dim 128 --seqlen 8192}"
  for case in "${cases[@]}"; do
    name=${case%%:*}
    read -ra case_args <<< "${case#*:}"
    timeout 180 ncu --clock-control none --import-source no --section SpeedOfLight \
      --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis -k regex:flash_fwd_sm90 --launch-skip 2 \
      --launch-count 1 -f -o "$OUT/ncu-$name" \
      python3 tools/flash_attention/ncu_one.py "${case_args[@]}" > "$OUT/ncu-$name.log" 2>&1
    echo "ncu [$name]: rc=$?"
    ncu -i "$OUT/ncu-$name.ncu-rep" --page details --csv > "$OUT/ncu-$name-details.csv" 2>&1
    ncu -i "$OUT/ncu-$name.ncu-rep" --page source --csv --print-source sass \
      > "$OUT/ncu-$name-sass.csv" 2>&1
    echo "ncu [$name]: details $(wc -l < "$OUT/ncu-$name-details.csv") lines, sass $(wc -l < "$OUT/ncu-$name-sass.csv") lines"
  done
fi
if [[ ${PACK:-0} == 1 ]]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name table.txt ! -name logs.tgz -printf '%P\n' \
    | tar -czf logs.tgz -T - --remove-files)
fi
if [[ -f $OUT/table.txt ]]; then cat "$OUT/table.txt"; fi
