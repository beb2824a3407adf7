#!/usr/bin/env bash
# One device call (issue 48, item 6), from the repository root: the default plan on the
# local backend for this tree and for the tree before the harness change (.old/, made here
# with `git archive BEFORE | tar -x -C .old` and carried), one after the other; then the
# GPU tests of the worker path and the cheat suite (TESTS=0 skips them). Prints launch wall times, phase times
# and, per config, our kernel's median by the harness beside its own reported median and
# beside the old tree's median (tools/verdict/agreement.py); the run folders come back
# packed in $OUT/runs.tgz. Needs the wheels of .whl/ (pydantic & co.).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
repo=$PWD
out=${OUT:-/tmp/agreement}
mkdir -p "$out"
work=$(mktemp -d /tmp/agreement.XXXXXX)
# The runs come back whatever happens (a timeout's TERM included).
trap 'tar -czf "$out/runs.tgz" -C "$work" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

# KERNEL=examples/NAME: that example instead of our kernel, for every tree (this tree's copy,
# its Triton pin dropped: the device has no package index and its own Triton), with
# IDENTITY=its name for the table.
kernel=()
if [ -n "${KERNEL:-}" ]; then
  cp -r "$repo/$KERNEL" "$work/kernel"
  sed -i '/^requirements *=/d' "$work/kernel/bench-kernel.toml"
  kernel=(--kernel "$work/kernel")
fi

launch() {  # tree label
  local tree=$1 label=$2 start end
  start=$(date +%s.%N)
  (cd "$tree" && BENCH_STATE_DIR="$work/$label-state" PYTHONPATH="/tmp/site:$tree" \
    python3 -m orchestrator launch --backend local --plan "${PLAN:-default}" --budget 1.00 \
    "${kernel[@]}" --wait) > "$work/$label-launch.log" 2>&1
  local code=$?
  end=$(date +%s.%N)
  echo "$label: launch exit $code in $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$work/walls.txt"
  (cd "$tree" && BENCH_STATE_DIR="$work/$label-state" PYTHONPATH="/tmp/site:$tree" \
    python3 -m orchestrator fetch --all --dest "$work/$label-results") > "$work/$label-fetch.log" 2>&1
  tail -n 5 "$work/$label-launch.log"
}

# A label other than `new` names a carried tree: old -> .old, old2 -> .old2.
for label in ${ORDER:-new old}; do
  if [ "$label" = new ]; then launch "$repo" new; else launch "$repo/.$label" "$label"; fi
done
others=$(for label in ${ORDER:-new old}; do [ "$label" = new ] || printf '%s ' "$label"; done)
OLD_LABELS="$others" IDENTITY="${IDENTITY:-flash}" python3 "$repo/tools/verdict/agreement.py" "$work" | tee "$out/agreement.txt"
if [ "${BREAKDOWN:-0}" = 1 ]; then
  PYTHONPATH="/tmp/site:$repo" timeout 240 python3 "$repo/tools/verdict/sample_breakdown.py" \
    2>&1 | grep -v "^benchmark\|^correctness" | tee "$out/breakdown.txt" | tail -n 45
fi
if [ "${PLAN_BREAKDOWN:-0}" = 1 ]; then
  # The last run of this tree, again in one process with its parts clocked (plan_breakdown.py).
  sandboxes=("$work"/new-state/sandboxes/*/)  # run ids sort by their start
  sandbox=${sandboxes[-1]}
  PYTHONPATH=/tmp/site timeout 240 python3 "$repo/tools/verdict/plan_breakdown.py" "$sandbox" \
    "$work/breakdown-run" > "$out/plan_breakdown.txt" 2>&1
  tail -n 40 "$out/plan_breakdown.txt"
fi
if [ "${TESTS:-1}" = 1 ]; then
  # EXTRA_TESTS may name several paths: split on purpose.
  # shellcheck disable=SC2086
  # Into a file, not a pipe (tools/gpu_suite_device.sh says why).
  PYTHONPATH="/tmp/site:$repo" timeout -k 10 480 python3 -m pytest -q -rfE -p no:cacheprovider \
    -m gpu tests/gpu/test_worker_gpu.py tests/gpu/test_cheats.py tests/gpu/test_cheat_suite_gpu.py \
    ${EXTRA_TESTS:-} > "$out/pytest.txt" 2>&1 < /dev/null
  tail -n 25 "$out/pytest.txt"
fi
cat "$work/walls.txt"
