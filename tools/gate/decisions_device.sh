#!/usr/bin/env bash
# One device call (issue 49, item 5), from the repository root, .whl/ carried (pydantic & co.:
# the device image lacks them):
#
#   CALL=c1 bash tools/gate/decisions_device.sh
#
# The gate's operating point from whole gate runs, one decision each: every decision is its own
# `bench launch --backend local ... --baseline BASE --wait --fail-on slower` of the gate plan
# (20 samples a config over 4 placements, then 40 and 80: GATE), our kernel's tree against a
# copy of it (identical) or against a copy slowed by PLANT_PCT % (tools/gate/plant_slowdown.py),
# on a lean plan (CONFIGS: one config of about 0.7 ms, bf16 B2 H16 S4096 D128), SDPA and its
# A/A control beside them. Each launch is a fresh harness, fresh workers and fresh placements:
# what chunks of one long run could not be (operating_point_device.sh found its chunks share an
# offset, ICC 0.41).
#
# One lane a GPU (LANES, default every GPU): each launches runs one after another, kinds in the
# order of PATTERN (lane g starting g x LANE_OFFSET places on), until a launch would end past WALL_S less
# ANALYSIS_S, with its own state folder (its own caches: its first launch builds). Each launch
# appends "SERIES KIND EXIT RUN_DIR" to launches.tsv (SERIES: CALL-gpuG; RUN_DIR beside it), then
# tools/gate/operating_point.py analyze --series replays each run's decision (held to the
# launch's own exit), counts the rates and reads the independence across each lane's runs in
# time order (lag-1) and across lanes (ANOVA). Under $OUT: launches.txt, decisions.txt and
# .json, the runs' CSVs, manifests and gate files (runs.tgz); the table is printed last.
set -uo pipefail
T0=$(date +%s)
CALL=${CALL:-c1}
WALL_S=${WALL_S:-520}
ANALYSIS_S=${ANALYSIS_S:-45}
PLANT_PCT=${PLANT_PCT:-3}
CONFIGS=${CONFIGS:-bf16-b2h16s4096d128}
GATE=${GATE:-20/4/80}
PATTERN=${PATTERN:-identical identical identical identical slowed}
FIRST_LAUNCH_S=${FIRST_LAUNCH_S:-120}  # what a launch that builds its tree may take
LANE_OFFSET=${LANE_OFFSET:-4}  # lane g starts g x this far into PATTERN (its slowed runs early)

# shellcheck source=tools/gate/trees.sh
. tools/gate/trees.sh
gate_setup decisions || exit 1
LANES=${LANES:-$(nvidia-smi -L | wc -l)}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader | tee "$out/gpu.txt"

PLANT=sleep PLANT_PCT=$PLANT_PCT make_trees "$repo" "$work" || exit 1
read -r first placements bound <<< "${GATE//\// }"
python3 "$tool" plan --configs "$CONFIGS" --rounds "$bound" \
  --per-placement $(( first / placements )) --gate "$GATE" "$work/gate.json" || exit 1

lane() {  # GPU: launches until the wall is spent, or two fail in a row
  local gpu=$1 longest=$FIRST_LAUNCH_S failed=0 index kind tree started took code run
  local log="$work/launch-$1.log"
  local -a kinds
  local -A built
  read -r -a kinds <<< "$PATTERN"
  index=$(( gpu * LANE_OFFSET ))
  while (( $(date +%s) + longest <= T0 + WALL_S - ANALYSIS_S )); do
    kind=${kinds[$(( index % ${#kinds[@]} ))]}
    index=$(( index + 1 ))
    tree=$repo
    [ "$kind" = slowed ] && tree=$work/slowed
    started=$(date +%s)
    (cd "$tree" && CUDA_VISIBLE_DEVICES=$gpu BENCH_STATE_DIR="$work/state-$gpu" \
      PYTHONPATH="/tmp/site:$tree" python3 -m orchestrator launch --backend local --budget 1 \
      --plan "$work/gate.json" --baseline "$work/base" --wait --fail-on slower \
      --dest "$work/results-$gpu") > "$log" 2>&1
    code=$?
    took=$(( $(date +%s) - started ))
    run=$(grep -o 'launched run [0-9a-f-]*' "$log" | head -1 | cut -d' ' -f3)
    echo "$CALL-gpu$gpu $kind $code results-$gpu/${run:-none}" >> "$work/launches.tsv"
    echo "$CALL-gpu$gpu $kind exit $code ${took}s ${run:-none}" >> "$out/launches.txt"
    if [ -z "$run" ] || (( code != 0 && code != 6 && code != 7 )); then
      tail -n 12 "$log" >> "$out/launches.txt"
      failed=$(( failed + 1 ))
      (( failed >= 2 )) && break
    else
      failed=0
    fi
    # A kind's first launch in a lane builds its tree; the next may take as long as the
    # longest launch that did not (or a first one, until there is one).
    if [ -n "${built[$kind]:-}" ]; then
      (( took > longest || longest == FIRST_LAUNCH_S )) && longest=$took
    fi
    built[$kind]=1
  done
}

for gpu in $(seq 0 $(( LANES - 1 ))); do
  lane "$gpu" &
done
wait
echo "launches done at $(( $(date +%s) - T0 )) s: $(wc -l < "$work/launches.tsv") launches" \
  | tee -a "$out/launches.txt"
left=$(( T0 + WALL_S + 20 - $(date +%s) ))
(( left < 30 )) && left=30
timeout "$left" python3 "$tool" analyze --series "$work/launches.tsv" --gate "$GATE" \
  --jobs 16 --json "$out/decisions.json" > "$out/decisions.txt" 2>&1
cp "$work/launches.tsv" "$out/launches.tsv"
(cd "$work" && find results-* -maxdepth 2 \( -name gate.json -o -name gate.md \
  -o -name manifest.json \) -print0; find results-* -path '*/results/*.csv' -print0) \
  | tar -czf "$out/runs.tgz" -C "$work" --null -T - 2>/dev/null
echo "== total $(( $(date +%s) - T0 )) s"
cat "$out/launches.txt"
echo
cat "$out/decisions.txt"
