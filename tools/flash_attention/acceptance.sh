#!/usr/bin/env bash
# Issue 34's acceptance in one device call (NOTES.md, "2026-11-27, round 3 end"): build times
# (cold on all cores and on 4, warm), the GPU tests of every path and memcheck on the tail
# shapes (run.sh's steps), the Hopper path against cuDNN over the 40-config grid with the tree
# before timed alongside in the same process (item1.sh's ab step), the L4 path (emulated)
# against sdpa-flash at S >= 1024, and GQA and head dim 256 against SDPA's best backend
# (bench.py, the Hopper path). Each step's log under $OUT, packed into logs.tgz at the end;
# the acceptance table (table.txt) and the summary (summary.txt) beside it, printed last.
# Usage (repo root, GPU machine):
#   BASE=DIR [STEPS=build,test,sanitize,hopper,l4,gqa] [REPS=40] \
#     bash tools/flash_attention/acceptance.sh
# BASE: a directory holding the tree before (git archive HEAD kernels | tar -x -C DIR); the
# hopper step's alone.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
OUT=${OUT:-/tmp/flash-out}
STEPS=${STEPS:-build,test,sanitize,hopper,l4,gqa}
REPS=${REPS:-40}
SEQLENS=1024,2048,4096,8192,16384
mkdir -p "$OUT"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
# Only the hopper step times the tree before.
if has hopper; then : "${BASE:?the tree before: a directory holding kernels/}"; fi
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
# step NAME COMMAND...: its output in $OUT/NAME.log, its status and seconds in the summary.
step() {
  local name=$1 start=$SECONDS
  shift
  "$@" > "$OUT/$name.log" 2>&1
  summary "$name: rc=$? $((SECONDS - start)) s"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv,noheader | tee "$OUT/gpu.txt"
run_steps() { OUT="$OUT/run" STEPS=$1 bash tools/flash_attention/run.sh; }
if has build; then
  step build run_steps build
  grep -E "^build_" "$OUT/build.log" | cut -c1-160 | tee -a "$OUT/summary.txt"
fi
if has test; then
  step test run_steps test
  grep -E "pytest rc|passed|failed" "$OUT/test.log" | tail -3 | tee -a "$OUT/summary.txt"
fi
if has sanitize; then
  step sanitize run_steps sanitize
  grep -E "^memcheck" "$OUT/sanitize.log" | tee -a "$OUT/summary.txt"
fi
if has hopper; then
  # The shipped tree against the tree before, cuDNN beside them, in one process.
  step hopper env OUT="$OUT/hopper" BUILDS="new= before@$BASE=" PEERS=sdpa-cudnn STEPS=ab \
    AB_TIMEOUT=300 bash tools/flash_attention/item1.sh --reps "$REPS"
  cp "$OUT/hopper/table.txt" "$OUT/table.txt"
  tail -3 "$OUT/table.txt" | tee -a "$OUT/summary.txt"
fi
bench() {  # NAME bench.py args: one process, its JSON under $OUT
  step "$1" python3 tools/flash_attention/bench.py --reps "$REPS" --json "$OUT/$1.json" "${@:2}"
}
if has l4; then
  bench l4 --l4 --seqlens "$SEQLENS" --impls flash,sdpa-flash
fi
if has gqa; then
  impls=flash,sdpa-flash,sdpa-cudnn,sdpa-efficient
  for group in 4 8; do
    bench "gqa-g$group" --head-dims 64,128 --heads 32 --group "$group" \
      --seqlens 1024,4096,16384 --dtypes bfloat16 --impls "$impls"
  done
  bench d256 --head-dims 256 --seqlens 1024,4096,16384 --impls "$impls"
fi
python3 - "$OUT" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
def rows(name):
    path = out / f"{name}.json"
    return json.loads(path.read_text())["rows"] if path.is_file() else []
l4 = [r["vs_flash"] for r in rows("l4") if "vs_flash" in r]
if l4:
    print(f"l4 / sdpa-flash, {len(l4)} configs at S >= 1024: median {statistics.median(l4):.3f},"
          f" min {min(l4):.3f}, below 1.0: {sum(v < 1 for v in l4)}")
for name in ("gqa-g4", "gqa-g8", "d256"):
    for r in rows(name):
        best = min((k for k in ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient") if k in r),
                   key=lambda k: -r[k], default="-")
        print(f"{name} {r['dtype']} D={r['D']} causal={r['causal']} S={r['S']}"
              f" H={r['H']}/{r['H_kv']}: ours {r.get('flash')} TFLOP/s, best SDPA {best}"
              f" {r.get(best)}, vs_best {r.get('vs_best')}")
PYEOF
(cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name table.txt ! -name summary.txt \
  ! -name logs.tgz -printf '%P\n' | tar -czf logs.tgz -T - --remove-files)
cat "$OUT/table.txt" 2>/dev/null
cat "$OUT/summary.txt"
