#!/usr/bin/env bash
# One device call (developer tool): the real `bench` CLI on the local backend with the
# default GPU plan, twice back to back; fetch, report, compare, check the second run's
# medians against triton's do_bench (tools/crosscheck.py); a short table last.
# Needs the wheels in .whl/ (pydantic & co. are not on the device image).
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
# Fresh state and results on every call: a warm machine keeps /tmp between calls, and the
# two runs compared below must be this call's.
scratch=$(mktemp -d /tmp/bench-e2e.XXXXXX)
export PYTHONPATH="/tmp/site:$PWD" BENCH_STATE_DIR="$scratch/state" PYTHONUNBUFFERED=1
out=${OUT:-/tmp/bench-out}
results="$scratch/results"
mkdir -p "$out"
bench() { python3 -m orchestrator "$@"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
for round in 1 2; do
  start=$(date +%s)
  bench launch --backend local --plan "${PLAN:-default}" --budget 1.00 --wait | tail -n 3
  echo "round $round: launch --wait took $(( $(date +%s) - start )) s"
done
bench fetch --all --dest "$results" | tail -n 20
mapfile -t runs < <(ls "$results")
bench report "${runs[0]}" --dest "$results" | tail -n 5
bench report "${runs[1]}" --compare "${runs[0]}" --dest "$results" | tail -n 12
cp "$results/${runs[1]}"/report/*.png "$out/" 2>/dev/null || true
cp "$results/${runs[0]}/manifest.json" "$out/manifest-a.json"
cp "$results/${runs[1]}/manifest.json" "$out/manifest-b.json"
cp "$results/${runs[1]}/results/summary.csv" "$out/summary-b.csv"
python3 -m tools.crosscheck dobench "$results/${runs[1]}" --plan "${PLAN:-default}" --json /tmp/dobench.json \
  | tee "$out/dobench.txt"
python3 tools/devrun_table.py "$results/${runs[0]}" "$results/${runs[1]}" | tee "$out/table.txt"
