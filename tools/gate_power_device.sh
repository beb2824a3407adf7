#!/usr/bin/env bash
# On a GPU host: the CI gate's power at one known small slowdown. The candidate is our
# kernel with a GPU-side spin (torch.cuda._sleep) after every launch of over 1e10 FLOPs,
# added in api.py. NB (measured 2026-11-25): flash@baseline runs the baseline tree's
# compiled library through the CANDIDATE's api.py, so a slowdown there reaches both sides
# and the gate reads 1.000x; a power test needs the slowdown in csrc/ (or each tree's
# wrapper loaded on its own, issue 29 item 6). Kept as the record of that run and as the
# do_bench half of a future one.
# sized to SLOW_PCT of that launch's time at 550 TFLOP/s (the 10 larger configs of the
# default plan; the 3 tiny ones untouched). do_bench measures each config's slowdown in one
# process first; then ROUNDS gated runs of the default plan against the untouched tree.
# Needs the payload's python (torch, triton) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gate-power}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo" SLOW_PCT=${SLOW_PCT:-5}
mkdir -p "$out" "$work/base"
cp -r "$repo/kernels" "$work/base/"

python3 - "$repo/kernels/flash_attention/api.py" <<'EOF'
import os, sys
path = sys.argv[1]
text = open(path).read()
tail = '''        raise RuntimeError(f"flash_attention kernel failed: {lib.error_string(code).decode()}")
    return out, lse
'''
slow = '''        raise RuntimeError(f"flash_attention kernel failed: {lib.error_string(code).decode()}")
    work = 4.0 * b * h * s_q * k.shape[2] * d / (2 if causal else 1)
    if work > 1e10:  # a known slowdown for the gate's power test (tools/gate_power_device.sh)
        torch.cuda._sleep(int(work / 550e12 * %s / 100 * 1.98e9))
    return out, lse
''' % os.environ["SLOW_PCT"]
assert text.count(tail) == 1
open(path, "w").write(text.replace(tail, slow))
EOF

python3 - "$repo/benches/plans/default.json" <<'EOF' | tee "$out/do_bench.txt"
import json, math, os, sys
import torch
from triton.testing import do_bench
from kernels.flash_attention import api
pct = float(os.environ["SLOW_PCT"])
plan = json.load(open(sys.argv[1]))
dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ratios = []
real_sleep = torch.cuda._sleep
for c in plan["configs"]:
    kv = c.get("kv_heads") or c["heads"]
    shape = lambda h: (c["batch"], h, c["seq_len"], c["head_dim"])
    q = torch.randn(shape(c["heads"]), device="cuda", dtype=dtypes[c["dtype"]])
    k, v = (torch.randn(shape(kv), device="cuda", dtype=q.dtype) for _ in range(2))
    work = 4.0 * c["batch"] * c["heads"] * c["seq_len"] ** 2 * c["head_dim"] / (2 if c["causal"] else 1)
    def timed(spin):  # the patched api calls torch.cuda._sleep: off for the plain kernel
        torch.cuda._sleep = real_sleep if spin else (lambda cycles: None)
        return do_bench(lambda: api.flash_attention(q, k, v, causal=c["causal"]), warmup=25, rep=200)
    rounds = [(timed(False), timed(True)) for _ in range(3)]  # taking turns, one process
    plain, slowed = min(r[0] for r in rounds), min(r[1] for r in rounds)
    ratios.append(plain / slowed)
    print(f"{c['name']:32s} plain {plain*1e3:9.1f} us  slowed {slowed*1e3:9.1f} us  ratio {plain/slowed:.3f}")
torch.cuda._sleep = real_sleep
geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
print(f"geomean speed ratio {geo:.4f} (slowdown {100*(1/geo-1):.2f} %)")
EOF

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
