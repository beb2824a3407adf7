#!/usr/bin/env bash
# On a GPU host: the CI gate's power at one known small slowdown. The candidate is our
# kernel with a GPU-side pause in csrc/: each Hopper consumer warpgroup sleeps DELAY_NS
# nanoseconds (__nanosleep) per K/V block of its tile before writing O, so the slowdown
# grows with the work like the kernel's own time. (A slowdown in api.py is invisible to
# the A/B of our kernel: flash@baseline runs the baseline's library through the candidate's
# api.py; measured 2026-11-25, 1.000x.) do_bench measures each config's slowdown in one
# process first (the slowed library as `flash`, the untouched tree's as flash@baseline,
# taking turns); then ROUNDS gated runs of the default plan against the untouched tree.
# Needs the payload's python (torch, triton) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gate-power}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo" DELAY_NS=${DELAY_NS:-40}
mkdir -p "$out" "$work/base"
cp -r "$repo/kernels" "$work/base/"

python3 - "$repo/kernels/flash_attention/csrc/flash_fwd_kernel_sm90.cuh" <<'PATCH'
import os, sys
path = sys.argv[1]
text = open(path).read()
site = "    Elem* o = static_cast<Elem*>(p.o) + tile.batch * p.o_batch_stride"
pause = ("    for (int j = 0; j < n_blocks; ++j) __nanosleep(%s);  // gate_power_device.sh\n"
         % os.environ["DELAY_NS"])
assert text.count(site) == 1
open(path, "w").write(text.replace(site, pause + site))
PATCH

export BENCH_BASELINE_ROOT="$work/base" BENCH_BASELINE_CACHE="$work/kernels-baseline"
export BENCH_BASELINE_BUILD="$work/baseline_build.json"
python3 -m kernels.baseline --root "$work/base" --arch sm_90 --record "$BENCH_BASELINE_BUILD" \
  > "$out/baseline-build.log" 2>&1 || { echo "baseline build failed"; tail -n 5 "$out/baseline-build.log"; }
python3 - "$repo/benches/plans/default.json" <<'DOBENCH' | tee "$out/do_bench.txt"
import json, math, sys
import torch
from triton.testing import do_bench
from kernels import baseline
from kernels.flash_attention import api
plan = json.load(open(sys.argv[1]))
dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ratios = []
for c in plan["configs"]:
    kv = c.get("kv_heads") or c["heads"]
    shape = lambda h: (c["batch"], h, c["seq_len"], c["head_dim"])
    q = torch.randn(shape(c["heads"]), device="cuda", dtype=dtypes[c["dtype"]])
    k, v = (torch.randn(shape(kv), device="cuda", dtype=q.dtype) for _ in range(2))
    slowed = lambda: api.flash_attention(q, k, v, causal=c["causal"])
    plain = lambda: baseline.run(q, k, v, c["causal"])
    rounds = [(do_bench(plain, warmup=25, rep=200), do_bench(slowed, warmup=25, rep=200))
              for _ in range(3)]  # taking turns, one process
    p, s = min(r[0] for r in rounds), min(r[1] for r in rounds)
    ratios.append(p / s)
    print(f"{c['name']:32s} plain {p*1e3:9.1f} us  slowed {s*1e3:9.1f} us  ratio {p/s:.3f}")
geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
print(f"geomean speed ratio {geo:.4f} (slowdown {100*(1/geo-1):.2f} %)")
DOBENCH
unset BENCH_BASELINE_ROOT BENCH_BASELINE_CACHE BENCH_BASELINE_BUILD

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
