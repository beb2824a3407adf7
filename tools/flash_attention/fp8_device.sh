#!/usr/bin/env bash
# On the H200 (the device tool), from the repository root, with .whl/ carried (and .whl-cudnn/
# for cuDNN's FP8 SDPA): the FP8 (e4m3) forward of issue 53 item 4, in one call.
#  1. installs the wheels into /tmp/site (no dependencies; the frontend needs only the cuDNN
#     torch ships);
#  2. builds the library cold on all cores, then again cold on 4 (`taskset -c 0-3`, item 6's
#     budget), each into its own cache; prints both times and the FP8 units' seconds;
#  3. correctness (tools/flash_attention/fp8_check.py correct): D = 128 and 256, B = 2, H = 16,
#     S in {512, 4096, 1000} and GQA 16/4 at 1000, causal and not, against float64 attention on
#     the dequantized inputs, beside an emulated FP8 reference (P rounded to e4m3);
#  4. timing (`time`): TFLOP/s at S = 16k, B = 2 of our FP8 call (V's transpose included) and
#     our bf16 kernel; 5. cuDNN's FP8 SDPA (`cudnn`) on the same shapes, if `import cudnn` works;
#  6. runs tests/gpu/test_flash_fp8_gpu.py (if the shipped schedule's probe finished);
#  7. prints the table last. Before 3, each schedule (flags 0, the shipped choice per shape,
#     and 1, the consumers' turns off) is probed with one small call under a 60 s timeout; 3-5
#     run the ones that finished. fp8_turns_device.sh compares the schedules (turns forced on too).
# Each step runs under `timeout` in its own process, so a fault or a hang still leaves the
# rest. Writes build-*.json/log, probe-*, correct.json, time.json, cudnn.json, pytest.txt and
# the logs under $OUT.
# About 4-6 minutes; STEPS (default "build correct time cudnn pytest") and DIMS ("128 256")
# narrow it.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/fp8-device}
site=${SITE:-/tmp/site}
steps=${STEPS:-build correct time cudnn pytest}
dims=${DIMS:-128 256}
mkdir -p "$out" "$site"
cd "$repo" || exit 1
shopt -s nullglob
wheels=(.whl/*.whl .whl-cudnn/*.whl)
[ ${#wheels[@]} -gt 0 ] && python3 -m pip install -q --no-index --no-deps --no-compile \
  --upgrade --target "$site" "${wheels[@]}" 2>&1 | tail -n 3
export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1
export FLASH_KERNEL_CACHE=${FLASH_KERNEL_CACHE:-/tmp/flash-kernel-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$out/gpu.txt"

has() { [[ " $steps " == *" $1 "* ]]; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

if has build; then
  echo "== build (cold, all cores)"
  start=$(date +%s%N)
  timeout 300 python3 -m kernels.flash_attention.build --force --record "$out/build-all.json" \
    > "$out/build-all.log" 2>&1
  echo "exit $? in $(ms_since "$start") ms (nproc $(nproc))"
  grep -m 20 -iE "error|failed" "$out/build-all.log"
  echo "== build (cold, 4 cores: taskset -c 0-3)"
  start=$(date +%s%N)
  FLASH_KERNEL_CACHE=/tmp/flash-kernel-cache-4 timeout 300 taskset -c 0-3 \
    python3 -m kernels.flash_attention.build --force --jobs 4 --record "$out/build-4.json" \
    > "$out/build-4.log" 2>&1
  echo "exit $? in $(ms_since "$start") ms"
  python3 - "$out" <<'UNITS'
import json, sys
for name in ("build-all", "build-4"):
    try:
        rec = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except Exception as err:
        print(name, "no record:", err)
        continue
    units = rec.get("unit_seconds", {})
    slow = sorted(units.items(), key=lambda kv: -kv[1])[:3]
    fp8 = {k: round(v, 1) for k, v in units.items() if "e4m3" in k}
    print(f"{name}: build() {rec['seconds']:.1f} s, {len(units)} units, slowest "
          f"{[(k, round(v, 1)) for k, v in slow]}, FP8 units {fp8}")
UNITS
fi

# The schedules to run: the shipped one (flags 0) and the one without the consumers' turns (1),
# each kept only if one small call per head dim and causal setting finishes within 60 s (a
# schedule that deadlocks must not eat the call's time).
flags=""
for f in 0 1; do
  # shellcheck disable=SC2086
  timeout 60 python3 tools/flash_attention/fp8_check.py probe "$out/probe-$f.json" \
    --dims $dims --flags "$f" > "$out/probe-$f.log" 2>&1
  code=$?
  echo "== probe flags=$f: exit $code $(tail -n 1 "$out/probe-$f.log" | cut -c1-300)"
  [ "$code" -eq 0 ] && flags="$flags $f"
done

if has correct; then
  echo "== correctness (flags:$flags)"
  # shellcheck disable=SC2086
  timeout 150 python3 tools/flash_attention/fp8_check.py correct "$out/correct.json" \
    --dims $dims --flags $flags > "$out/correct.log" 2>&1
  echo "exit $?"
  tail -n 3 "$out/correct.log"
fi

if has time; then
  echo "== timing (ours)"
  # shellcheck disable=SC2086
  timeout 150 python3 tools/flash_attention/fp8_check.py time "$out/time.json" --dims $dims \
    --flags $flags > "$out/time.log" 2>&1
  echo "exit $?"
  tail -n 2 "$out/time.log"
fi

if has cudnn; then
  echo "== cuDNN FP8 SDPA"
  # shellcheck disable=SC2086
  timeout 120 python3 tools/flash_attention/fp8_check.py cudnn "$out/cudnn.json" --dims $dims \
    --flags $flags > "$out/cudnn.log" 2>&1
  echo "exit $?"
  tail -n 2 "$out/cudnn.log"
fi

if has pytest && [[ " $flags " == *" 0 "* ]]; then
  echo "== GPU tests of the FP8 path (tests/gpu/test_flash_fp8_gpu.py)"
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_flash_fp8_gpu.py \
    > "$out/pytest.txt" 2>&1
  echo "exit $?"
  grep -E "passed|failed|error" "$out/pytest.txt" | tail -n 3
fi

echo "== table"
python3 tools/flash_attention/fp8_check.py table "$out/correct.json" "$out/time.json" \
  "$out/cudnn.json" 2>&1 | tee "$out/table.txt"
