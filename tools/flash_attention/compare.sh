#!/usr/bin/env bash
# Benchmarks kernel paths, each in its own process, then prints a ratio table (last).
# Usage (repo root, GPU machine): [PATHS="hopper= sm80=--sm80 l4=--l4"] \
#   bash tools/flash_attention/compare.sh [bench.py args]
# PATHS: label=flags pairs (flags comma-separated) for bench.py; each label's TFLOP/s is set
# against the sdpa-flash and sdpa-cudnn timings of its own process. TREES: label=dir pairs,
# each dir holding another copy of kernels/ (an older version) benchmarked the same way.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
OUT=${OUT:-/tmp/flash-out}
mkdir -p "$OUT"
LABELS=()
for pair in ${PATHS:-hopper= sm80=--sm80 l4=--l4}; do
  label=${pair%%=*}; flags=${pair#*=}
  read -ra flag_list <<< "${flags//,/ }"
  python3 tools/flash_attention/bench.py --json "$OUT/bench-$label.json" "${flag_list[@]}" "$@" \
    > "$OUT/bench-$label.log" 2>&1 || { echo "bench $label failed:"; tail -5 "$OUT/bench-$label.log"; }
  LABELS+=("$label")
  sleep 1  # let the power draw settle between processes, as FA3's script does
done
for pair in ${TREES:-}; do
  label=${pair%%=*}; dir=${pair#*=}
  PYTHONPATH=$dir:$PYTHONPATH python3 tools/flash_attention/bench.py \
    --json "$OUT/bench-$label.json" "$@" > "$OUT/bench-$label.log" 2>&1 \
    || { echo "bench $label failed:"; tail -5 "$OUT/bench-$label.log"; }
  LABELS+=("$label")
  sleep 1
done
grep -h "blocks/SM" "$OUT"/bench-*.log | sort -u
python3 - "$OUT" "${LABELS[@]}" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out, labels = Path(sys.argv[1]), sys.argv[2:]
runs = {l: json.loads((out / f"bench-{l}.json").read_text())["rows"] for l in labels
        if (out / f"bench-{l}.json").is_file()}
labels = [l for l in labels if l in runs]
key = lambda r: (r["dtype"], r["D"], r["causal"], r["S"])
table = {l: {key(r): r for r in rows} for l, rows in runs.items()}
head = f"{'dtype':9}{'D':>4}{'causal':>7}{'S':>6}"
for l in labels:
    head += f"{l:>9}{'/fl':>6}{'/cud':>6}"
print(head + "   (TFLOP/s; /fl, /cud: ratio to sdpa-flash, sdpa-cudnn of the same process)")
for k in table[labels[0]]:
    line = f"{k[0]:9}{k[1]:>4}{k[2]!s:>7}{k[3]:>6}"
    for l in labels:
        r = table[l].get(k, {})
        line += f"{r.get('flash', '-'):>9}{r.get('vs_flash', '-'):>6}{r.get('vs_cudnn', '-'):>6}"
    print(line)
for l in labels:
    rows = runs[l]
    for peer in ("vs_flash", "vs_cudnn"):
        vals = [r[peer] for r in rows if peer in r and r["S"] >= 1024]
        if vals:
            print(f"{l:>8} {peer} (S>=1024): median {statistics.median(vals):.3f}, "
                  f"min {min(vals):.3f}, max {max(vals):.3f}, "
                  f"{sum(v >= 1 for v in vals)} of {len(vals)} >= 1")
PYEOF
