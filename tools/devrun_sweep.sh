#!/usr/bin/env bash
# One device call (developer tool): a sweep of the local GPU through the real `bench` CLI
# on the local backend (`launch --gpu h100`, the GPU nvidia-smi names), then `fetch SWEEP`
# and `report SWEEP` at 80 columns; the sweep's plot and report text land in $OUT.
# Needs the wheels in .whl/ (pydantic & co. are not on the device image).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
scratch=$(mktemp -d /tmp/bench-sweep.XXXXXX)
export PYTHONPATH="/tmp/site:$PWD" BENCH_STATE_DIR="$scratch/state" PYTHONUNBUFFERED=1
export COLUMNS=80
out=${OUT:-/tmp/bench-out}
results="$scratch/results"
mkdir -p "$out"
bench() { python3 -m orchestrator "$@"; }

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
echo "--- a GPU type this machine does not have (expect exit 2)"
bench launch --backend local --gpu t4 --budget 1 ; echo "exit $?"
echo "--- kernels.support on the T4's capability (expect 'unsupported on sm_75', exit 1)"
python3 -m kernels.support 7.5; echo "exit $?"
echo "--- the sweep"
start=$(date +%s)
bench launch --backend local --gpu "${GPU:-h100}" --plan "${PLAN:-default}" --budget 1.00 --wait \
  | tee "$out/launch.txt" | grep -v '^bench: phase' | tail -n 25
echo "launch --wait took $(( $(date +%s) - start )) s"
sweep=$(grep -o 'sweep-[0-9]\{8\}-[0-9]\{6\}-[0-9a-f]\{6\}' "$out/launch.txt" | head -n 1)
bench status "$sweep"
bench fetch "$sweep" --dest "$results" | tail -n 8
bench report "$sweep" --dest "$results" | tee "$out/report.txt"
cp "$results/$sweep/report/gpus.png" "$out/" 2>/dev/null || echo "no plot"
for summary in "$results"/2*/results/summary.csv; do
  cp "$summary" "$out/summary.csv" 2>/dev/null || true
done
