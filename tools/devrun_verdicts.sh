#!/usr/bin/env bash
# Developer tool, two device calls: the evidence for issue 11's verdicts.
#   quick: the harness's gpu tests (cheats included), a profile of the correctness gate,
#          one default-plan run and its do_bench crosscheck.
#   full:  the real CLI on the local backend (fresh BENCH_STATE_DIR): the default plan 3
#          times (A/A control, wall time), the sensitivity plan once; do_bench crosscheck
#          of the first run; BEFORE_TREE (a
#          checkout of the code before this change) once for the "before" wall time; a
#          verdict table last.
# Run from this checkout's root with PYTHONPATH holding its dependencies.
set -uo pipefail
stage=${1:-quick}
out=${OUT:-/tmp/bench-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw \
  --format=csv,noheader

if [[ $stage == quick ]]; then
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cheats.py tests/gpu/test_harness.py \
    2>&1 | tee "$out/gpu-tests.txt" | tail -n 25
  python3 tools/profile_gate.py --passes 2 2>&1 | tee "$out/gate.txt"
  rm -rf /tmp/quick-run
  python3 -m benches run --plan default --out /tmp/quick-run 2>&1 | tee "$out/run.txt" \
    | grep -E "correctness:|benchmark:|WRONG|FAILED|Error"
  python3 -m benches.crosscheck dobench /tmp/quick-run 2>&1 | tee "$out/dobench.txt" | tail -n 2
  python3 tools/verdict_table.py /tmp/quick-run | tee "$out/table.txt"
  exit 0
fi

scratch=$(mktemp -d /tmp/bench-verdicts.XXXXXX)
bench() { BENCH_STATE_DIR="$scratch/state" python3 -m orchestrator "$@"; }
for plan in ${PLANS:-default default default sensitivity}; do
  start=$(date +%s)
  bench launch --backend local --plan "$plan" --budget 1.00 --wait 2>&1 | tail -n 2
  echo "$plan: launch --wait took $(( $(date +%s) - start )) s"
done
bench fetch --all --dest "$scratch/results" > /dev/null
mapfile -t runs < <(ls -d "$scratch"/results/*/)
if [[ -z ${SKIP_CROSSCHECK:-} ]]; then
  python3 -m benches.crosscheck dobench "${runs[0]}" --plan default 2>&1 \
    | tee "$out/dobench.txt" | tail -n 1
fi
if [[ -n ${BEFORE_TREE:-} ]]; then
  start=$(date +%s)
  (cd "$BEFORE_TREE" && BENCH_STATE_DIR="$scratch/before" \
    PYTHONPATH="${SITE:-/tmp/site}:$BEFORE_TREE" python3 -m orchestrator launch \
    --backend local --plan default --budget 1.00 --wait 2>&1 | tail -n 2)
  echo "before: launch --wait took $(( $(date +%s) - start )) s"
  (cd "$BEFORE_TREE" && BENCH_STATE_DIR="$scratch/before" \
    PYTHONPATH="${SITE:-/tmp/site}:$BEFORE_TREE" python3 -m orchestrator fetch --all \
    --dest "$scratch/before-results" > /dev/null)
  for m in "$scratch"/before-results/*/manifest.json; do
    python3 -c "import json,sys; m=json.load(open(sys.argv[1])); \
print('before phases:', {p['name']: round(p['seconds'], 1) for p in m['phases']})" "$m"
  done
fi
COLUMNS=160 bench report "$(basename "${runs[0]}")" --dest "$scratch/results" 2>&1 \
  | tail -n 4
tar -C "$scratch/results" -czf "$out/runs.tgz" .
python3 tools/verdict_table.py "${runs[@]}" | tee "$out/table.txt" | tail -n 30
