#!/usr/bin/env bash
# On the H200 (the device tool), from the repository root, with .whl/ and .whl-cudnn/ carried:
# the FP8 forward's schedules (issue 53, NOTES "f2"), in one call of at most 5 minutes.
# Schedules (FlashFp8Params.flags, csrc/flash_api.h): 0 `auto`, the shipped choice per shape
# (no turns since f2; at D = 128 224-key tiles from 8192 keys, 16384 causal, since f6), 1
# `no-turns`, 2 `turns`, 16 `two-S` and 32 `one-S` (128-key tiles at D = 128 with two S tiles in
# flight per consumer warpgroup, or one: NOTES "f5"; 17 and 18 two-S with the turns forced off /
# on). fp8_check.py's SCHEDULES lists the flags it takes.
#  1. installs the wheels into /tmp/site (no dependencies);
#  2. builds the library once, cold, on all cores; prints its time and the FP8 units' seconds;
#  3. probes each schedule with one small call per head dim and causal setting (a schedule
#     that hangs is left out of the rest);
#  4. correctness of every schedule that finished (fp8_check.py correct): D = 128 and 256,
#     causal and not, S 512 / 4096 / 1000 and GQA 16/4, against float64 on the dequantized
#     inputs, bound 2 x the emulated FP8 reference's error + 2^-8;
#  5. TFLOP/s at S = 16k, B = 2 (MHA 16 heads at D = 128 and 256, causal and not; GQA 64/8 at
#     D = 128) of each schedule and of cuDNN's FP8 SDPA (e4m3 out on Hopper, as fp8_device.sh),
#     3 rounds interleaved in one process, medians (fp8_check.py turns);
#  6. the GPU tests of the FP8 path, if the time left allows;
#  7. the table last.
# Each step runs in its own process under `timeout`, capped by the time left to the script's
# deadline (TOTAL_S, default 285 s), so a fault or a hang costs that step only. Everything is
# written under one folder and tarred into $OUT as ONE file, fp8-turns.tgz (on exit, whatever
# happened). DIMS ("128 256") and REPS (3) narrow or widen it; SEQLENS (none: 16k) times other
# lengths at 32k tokens a shape; FLAGS ("0 1 2") names the schedules; NCU_FLAGS (none by
# default), the schedules whose MHA D = 128 16k kernel ncu profiles (pipes and issue), after the
# table.
set -uo pipefail
t0=$(date +%s)
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/fp8-turns-out}
site=${SITE:-/tmp/site}
dims=${DIMS:-128 256}
reps=${REPS:-3}
total=${TOTAL_S:-285}
work=$(mktemp -d /tmp/fp8-turns.XXXXXX)/fp8-turns
mkdir -p "$out" "$site" "$work"
pack() { tar czf "$out/fp8-turns.tgz" -C "$(dirname "$work")" fp8-turns; }
trap pack EXIT
trap 'exit 143' TERM INT
cd "$repo" || exit 1

# Seconds a step may run: its own cap, or what is left before the deadline (minus a margin
# for the table and the tar), whichever is less; 0 when nothing is left.
budget() {
  local left=$((total - ($(date +%s) - t0) - 10))
  ((left < 0)) && left=0
  echo $((left < $1 ? left : $1))
}
step() {  # step CAP NAME COMMAND...: runs COMMAND under its budget, output in $work/NAME.log
  local cap name secs start code
  cap=$1 name=$2
  shift 2
  secs=$(budget "$cap")
  if ((secs < 5)); then
    echo "== $name: skipped, no time left"
    return 99
  fi
  start=$(date +%s)
  timeout "$secs" "$@" > "$work/$name.log" 2>&1
  code=$?
  echo "== $name: exit $code in $(($(date +%s) - start)) s (limit $secs s)"
  return "$code"
}

main() {
shopt -s nullglob
wheels=(.whl/*.whl .whl-cudnn/*.whl)
[ ${#wheels[@]} -gt 0 ] && timeout 120 python3 -m pip install -q --no-index --no-deps \
  --no-compile --upgrade --target "$site" "${wheels[@]}" 2>&1 | tail -n 3
export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1
export FLASH_KERNEL_CACHE=${FLASH_KERNEL_CACHE:-/tmp/flash-kernel-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv,noheader | tee "$work/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$work/gpu.txt"
git -C "$repo" log -1 --format='tree %h %s' 2>/dev/null | tee -a "$work/gpu.txt"

step 150 build python3 -m kernels.flash_attention.build --force --record "$work/build.json"
grep -m 20 -iE "error|failed" "$work/build.log"
python3 - "$work/build.json" <<'UNITS'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except Exception as err:
    sys.exit(f"build: no record: {err}")
units = rec.get("unit_seconds", {})
fp8 = {k: round(v, 1) for k, v in units.items() if "e4m3" in k}
print(f"build: build() {rec['seconds']:.1f} s on all cores, {len(units)} units, FP8 units {fp8}")
UNITS

flags=""
for f in ${FLAGS:-0 1 2}; do
  # shellcheck disable=SC2086
  step 45 "probe-$f" python3 tools/flash_attention/fp8_check.py probe "$work/probe-$f.json" \
    --dims $dims --flags "$f" && flags="$flags $f"
  tail -n 1 "$work/probe-$f.log" | cut -c1-300
done
echo "== schedules that finished their probes:${flags:- none}"

if [ -n "$flags" ]; then
  # shellcheck disable=SC2086
  step 120 correct python3 tools/flash_attention/fp8_check.py correct "$work/correct.json" \
    --dims $dims --flags $flags
  tail -n 2 "$work/correct.log" | cut -c1-300
fi

# cuDNN alone when no schedule finished: its figures still say where the target is.
# shellcheck disable=SC2086
step 150 turns python3 tools/flash_attention/fp8_check.py turns "$work/turns.json" \
  --dims $dims --reps "$reps" --flags $flags --seqlens ${SEQLENS:-}
tail -n 2 "$work/turns.log" | cut -c1-300

if [[ " $flags " == *" 0 "* ]]; then
  step 90 pytest python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_flash_fp8_gpu.py
  grep -E "passed|failed|error" "$work/pytest.log" | tail -n 3
fi

echo "== table ($(($(date +%s) - t0)) s so far)"
python3 tools/flash_attention/fp8_check.py table "$work/correct.json" "$work/turns.json" 2>&1 \
  | tee "$work/table.txt"

for f in ${NCU_FLAGS:-}; do
  step 60 "ncu-$f" ncu --clock-control none --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section InstructionStats \
    --metrics sm__inst_executed_pipe_xu.sum,sm__inst_executed.sum,sm__cycles_elapsed.avg \
    -k regex:flash_fwd_fp8 --launch-skip 3 --launch-count 1 \
    python3 tools/flash_attention/fp8_check.py probe "$work/ncu-probe-$f.json" --dims 128 \
    --flags "$f" --big
  grep -E "Issue Slots|Executed Ipc|pipe_xu|inst_executed.sum|cycles_elapsed|No Eligible|Stall|Warp Cycles" \
    "$work/ncu-$f.log" | head -n 14
done
}

main 2>&1 | tee "$work/console.txt"
