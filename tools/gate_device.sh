#!/usr/bin/env bash
# On a GPU host (the device tool's H100), the CI gate on the default plan, local backend:
# our kernel against a copy of its own kernels/ tree (an A/A through the whole gate) ROUNDS
# times, then SDPA made slower by a known extra kernel (sdpa-extra16 against sdpa) once.
# Prints each run's exit code and wall time, and the gate's markdown, last.
# Needs the payload's python (torch) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gate}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo"
mkdir -p "$out" "$work/base"
cp -r "$repo/kernels" "$work/base/"

gate() {  # gate LABEL ARGS...: one gated run; its exit code, seconds and markdown
  local label=$1 started code run
  shift
  started=$(date +%s)
  (cd "$work" && python3 -m orchestrator launch --backend local --budget 1 --plan default \
      --wait --fail-on slower --dest "$work/results" "$@") > "$out/$label.log" 2>&1
  code=$?
  run=$(grep -o 'launched run [0-9a-f-]*' "$out/$label.log" | head -1 | cut -d' ' -f3)
  echo "$label: exit $code in $(( $(date +%s) - started )) s (run $run)" | tee -a "$out/summary.txt"
  cp "$work/results/$run/gate.md" "$out/$label.md" 2>/dev/null
}

for i in $(seq 1 "$rounds"); do
  gate "aa-$i" --baseline "$work/base"
done
gate "extra16" --candidate sdpa-extra16 --baseline-impl sdpa
for f in "$out"/*.md; do echo "== $(basename "$f")"; head -12 "$f"; done
cat "$out/summary.txt"
