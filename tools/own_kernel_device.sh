#!/usr/bin/env bash
# On a GPU host (the device tool's H100): our kernel through its contract
# (kernels/bench-kernel.toml), on the path users' kernels take (issue 29 item 6).
#  1. A/A: the default plan with --baseline a copy of kernels/ (the same sources): flash and
#     flash@baseline are two kernel trees, each built by its contract's command and called
#     in a worker process of its own; every config should be judged equivalent.
#  2. A binding edit counts: the baseline's api.py copies q once more per call (q * 1, one
#     more elementwise kernel; the old path ran the baseline's library through the
#     candidate's api.py and could not see an edit there); the candidate should be judged
#     faster. (A CPU-only pause in the binding is not seen either way: the timed region is
#     the GPU's, and the harness's L2 flush ahead of it outlasts a few tens of µs of host
#     work; measured 2026-11-27, a 30 µs spin read 1.000x [0.999, 1.00].)
# CASES picks among "same slowapi" (default both).
# Each launch's phases (seconds) are printed: where a first result's time goes.
# Needs the payload's python (torch, triton) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/own-kernel}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo"
mkdir -p "$out" "$work/same" "$work/slowapi"
cp -r "$repo/kernels" "$work/same/"
cp -r "$repo/kernels" "$work/slowapi/"
python3 - "$work/slowapi/kernels/flash_attention/api.py" <<'PATCH'
import sys
path = sys.argv[1]
text = open(path).read()
site = '    """softmax(q k^T * scale) v; see flash_attention_with_lse for what is accepted."""\n'
copy = "    q = q * 1  # own_kernel_device.sh: one more pass over q, on the GPU\n"
assert text.count(site) == 1
open(path, "w").write(text.replace(site, site + copy))
PATCH

for case in ${CASES:-same slowapi}; do
  started=$(date +%s)
  (cd "$work" && python3 -m orchestrator launch --backend local --budget 1 --plan default \
      --baseline "$work/$case" --wait --fetch --dest "$work/results") > "$out/$case.log" 2>&1
  code=$?
  run=$(grep -o 'launched run [0-9a-f-]*' "$out/$case.log" | head -1 | cut -d' ' -f3)
  echo "$case: exit $code in $(( $(date +%s) - started )) s (run $run)" | tee -a "$out/summary.txt"
  cp -r "$work/results/$run" "$out/$case-run" 2>/dev/null
  (cd "$work" && python3 -m orchestrator report "$run" --dest "$work/results") \
    > "$out/$case-report.txt" 2>&1
done
for case in ${CASES:-same slowapi}; do
  echo "== $case"
  python3 - "$out/$case-run/manifest.json" <<'PHASES'
import json, sys
m = json.load(open(sys.argv[1]))
print("  ", m["status"], ", ".join(f"{p['name']} {p['seconds']:.0f}" for p in m["phases"]))
for b in m.get("user_builds") or []:
    print(f"   build {b['identity']}: {b['outcome']} {b['seconds']} s {b.get('message', '')}")
print("   noise:", (m.get("noise") or {}).get("verdict"))
PHASES
  sed -n '/^A\/B/,/^overall/p' "$out/$case-report.txt" | grep -v "ratio of medians"
  grep -A1 "^overall" "$out/$case-report.txt"
done
cat "$out/summary.txt"
