#!/usr/bin/env bash
# On a GPU host: the CI gate's power at one known small slowdown. The candidate is our
# kernel with a GPU-side pause in csrc/: each Hopper consumer warpgroup sleeps DELAY_NS
# nanoseconds (__nanosleep) per K/V block of its tile before writing O, so the slowdown
# grows with the work like the kernel's own time. ROUNDS gated runs of the default plan
# against the untouched tree follow. (Until 2026-11-27 a do_bench step timed both libraries
# in one process first, through kernels/baseline.py; both trees now run through their
# contract, each in its own worker: tools/own_kernel_device.sh.)
# Needs the payload's python (torch, triton) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gate-power}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo" DELAY_NS=${DELAY_NS:-40}
mkdir -p "$out" "$work/base"
cp -r "$repo/kernels" "$work/base/"

python3 - "$repo/kernels/flash_attention/csrc/flash_fwd_sm90_mainloop.cuh" <<'PATCH'
import os, sys
path = sys.argv[1]
text = open(path).read()
site = "    steps.write_output(tile, tma_o);\n"
pause = ("    for (int j = 0; j < n_blocks; ++j) __nanosleep(%s);  // gate_power_device.sh\n"
         % os.environ["DELAY_NS"])
assert text.count(site) == 1
open(path, "w").write(text.replace(site, pause + site))
PATCH

for i in $(seq 1 "$rounds"); do
  started=$(date +%s)
  (cd "$work" && python3 -m orchestrator launch --backend local --budget 1 --plan default \
      --baseline "$work/base" --wait --fail-on slower --dest "$work/results") > "$out/slow-$i.log" 2>&1
  code=$?
  run=$(grep -o 'launched run [0-9a-f-]*' "$out/slow-$i.log" | head -1 | cut -d' ' -f3)
  echo "slow-$i: exit $code in $(( $(date +%s) - started )) s (run $run)" | tee -a "$out/summary.txt"
  cp "$work/results/$run/gate.md" "$out/slow-$i.md" 2>/dev/null
done
for f in "$out"/slow-*.md; do echo "== $(basename "$f")"; sed -n 1,9p "$f"; done
cat "$out/do_bench.txt" "$out/summary.txt"
