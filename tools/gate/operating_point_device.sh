#!/usr/bin/env bash
# One device call on the H200 (issue 49, item 5), from the repository root, .whl/ carried
# (pydantic & co.: the device image lacks them):
#
#   bash tools/gate/operating_point_device.sh
#
# The gate's operating point from a few LONG local-backend runs, each our kernel's candidate
# tree against its base tree (`--baseline`, a copy of kernels/) on a lean plan (CONFIGS: by
# default one config of about 0.7 ms, bf16 B2 H16 S4096 D128, so that the time goes into
# decisions), SDPA and its A/A control beside them, one look of many placements of
# PER_PLACEMENT rounds (tools/gate/operating_point.py plan):
#   identical  the repository's own kernels/ against the copy: identical trees
#   slowed     a copy of the repository whose kernels/flash_attention/api.py plants a
#              slowdown of PLANT_PCT % of each call: before the kernel, torch.cuda._sleep
#              for cycles calibrated per shape in the worker (the kernel's own time and the
#              sleep's rate measured with CUDA events, the sleep's launch gap taken off), so
#              the call takes PLANT_PCT % longer whatever its shape. PLANT=nanosleep instead
#              patches the Hopper kernel as tools/gate_power_device.sh did (DELAY_NS per K/V
#              block; a rebuild). Each run measures what was planted: the analysis prints
#              each run's whole-run speedup.
# The first run (identical, FIRST_ROUNDS a config) gives the pace; the others are sized to
# end by WALL_S less ANALYSIS_S after the start, alternating slowed and identical. Then
# tools/gate/operating_point.py analyze replays the gate (GATES: first/placements/bound
# each) on chunks of the runs and prints its table last; everything is under $OUT (each
# run's log and gate.md, the analysis' JSON, runs.tgz of the fetched run folders).
set -uo pipefail
T0=$(date +%s)
WALL_S=${WALL_S:-500}
ANALYSIS_S=${ANALYSIS_S:-75}
PLANT=${PLANT:-sleep}
PLANT_PCT=${PLANT_PCT:-3}
DELAY_NS=${DELAY_NS:-40}
PER_PLACEMENT=${PER_PLACEMENT:-5}
FIRST_ROUNDS=${FIRST_ROUNDS:-600}
CONFIGS=${CONFIGS:-bf16-b2h16s4096d128}
GATES=${GATES:-20/4/80 40/8/160}
SEQUENCE=${SEQUENCE:-slowed identical slowed}
IDENTICAL_SHARE=${IDENTICAL_SHARE:-0.55}

# shellcheck source=tools/gate/trees.sh
. tools/gate/trees.sh
gate_setup oppoint || exit 1
export BENCH_STATE_DIR="$work/state"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader | tee "$out/gpu.txt"

PLANT=$PLANT PLANT_PCT=$PLANT_PCT DELAY_NS=$DELAY_NS make_trees "$repo" "$work" || exit 1
diff -r "$repo/kernels" "$work/slowed/kernels" | head -5

launch() {  # KIND LABEL ROUNDS: one long run, fetched; its folder listed in runs.txt
  local kind=$1 label=$2 rounds=$3 tree=$repo started code run
  [ "$kind" = slowed ] && tree=$work/slowed
  python3 "$tool" plan --configs "$CONFIGS" --rounds "$rounds" --per-placement "$PER_PLACEMENT" \
    "$work/$label.json" || return 1
  started=$(date +%s)
  (cd "$tree" && PYTHONPATH="/tmp/site:$tree" python3 -m orchestrator launch --backend local \
    --budget 1 --plan "$work/$label.json" --baseline "$work/base" --wait --fail-on slower \
    --dest "$work/results") > "$out/$label.log" 2>&1
  code=$?
  run=$(grep -o 'launched run [0-9a-f-]*' "$out/$label.log" | head -1 | cut -d' ' -f3)
  echo "$label ($kind): $rounds rounds a config, long run's own gate exit $code, $(( $(date +%s) - started )) s (run ${run:-none})" \
    | tee -a "$out/summary.txt"
  cp "$work/results/$run/gate.md" "$out/$label-gate.md" 2>/dev/null
  if [ -n "$run" ] && [ -f "$work/results/$run/results/measurements.csv" ]; then
    echo "$kind $work/results/$run" >> "$work/runs.txt"
    last_run="$work/results/$run"
  else
    tail -n 15 "$out/$label.log"
  fi
}

last_run=""
launch identical identical-1 "$FIRST_ROUNDS"
paced=$(python3 "$tool" pace "$last_run" 2>/dev/null || echo '{}')
echo "pace of the first run: $paced" | tee -a "$out/summary.txt"
count=$(echo "$SEQUENCE" | wc -w)
index=1
for kind in $SEQUENCE; do
  index=$((index + 1))
  remaining=$((count - index + 2))  # runs left, this one included
  rounds=$(python3 - "$paced" "$kind" "$remaining" <<PY
import json, math, sys, time
pace = json.loads(sys.argv[1] or "{}")
kind, left_runs = sys.argv[2], int(sys.argv[3])
per_round = (pace.get("seconds_per_round") or 0.03) * len("$CONFIGS".split(","))
overhead = max(pace.get("other_seconds") or 45.0, 30.0) + 5  # launch, fetch, builds
seconds = $T0 + $WALL_S - $ANALYSIS_S - time.time() - overhead * left_runs
order = "$SEQUENCE".split()[-left_runs:]
share = {"identical": $IDENTICAL_SHARE, "slowed": 1 - $IDENTICAL_SHARE}
weights = [share[k] / max(order.count(k), 1) for k in order]
# this run's part of what is left, by the shares of the kinds still to run
mine = seconds * weights[0] / sum(weights) if seconds > 0 else 0
rounds = int(mine / per_round) // $PER_PLACEMENT * $PER_PLACEMENT
print(rounds if rounds >= 160 else 0)
PY
)
  if [ "${rounds:-0}" -le 0 ]; then
    echo "$kind-$index: skipped, no time left for 160 rounds" | tee -a "$out/summary.txt"
    continue
  fi
  launch "$kind" "$kind-$index" "$rounds"
done

echo "runs done at $(( $(date +%s) - T0 )) s" | tee -a "$out/summary.txt"
identical=$(awk '$1 == "identical" {print $2}' "$work/runs.txt" 2>/dev/null)
slowed=$(awk '$1 == "slowed" {print $2}' "$work/runs.txt" 2>/dev/null)
left=$(( T0 + WALL_S + 15 - $(date +%s) ))
[ "$left" -lt 30 ] && left=30
for gate in $GATES; do
  name=${gate//\//-}
  # shellcheck disable=SC2086 # one folder a word
  timeout "$left" python3 "$tool" analyze --identical $identical --slowed $slowed \
    --gate "$gate" --jobs 8 --json "$out/oppoint-$name.json" > "$out/oppoint-$name.txt" 2>&1 &
done
wait
tar -czf "$out/runs.tgz" -C "$work" results 2>/dev/null
echo "== total $(( $(date +%s) - T0 )) s"
cat "$out/summary.txt"
for gate in $GATES; do
  echo
  cat "$out/oppoint-${gate//\//-}.txt"
done
