#!/usr/bin/env bash
# Benchmarks kernel paths, each in its own process, then prints a ratio table (last).
# Usage (repo root, GPU machine): [PATHS="hopper= sm80=--sm80 l4=--l4"] [ROUNDS=N] \
#   bash tools/flash_attention/compare.sh [bench.py args]
# PATHS: label=flags pairs (flags comma-separated) for bench.py; each label's TFLOP/s is set
# against the sdpa-flash and sdpa-cudnn timings of its own process. TREES: label=dir pairs,
# each dir holding another copy of kernels/ (an older version) benchmarked the same way.
# ROUNDS: run every label this many times, one process each, the labels taking turns; the
# table then gives each config's median over the processes. One process's ratio to
# sdpa-flash moves by up to +-2 % at S = 1024 (NOTES.md, v16).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
OUT=${OUT:-/tmp/flash-out}
ROUNDS=${ROUNDS:-1}
mkdir -p "$OUT"
LABELS=()
# bench LABEL SUFFIX PYTHONPATH [bench.py args]: one process, its JSON and log under $OUT.
bench() {
  local label=$1 suffix=$2 path=$3
  shift 3
  PYTHONPATH=$path python3 tools/flash_attention/bench.py \
    --json "$OUT/bench-$label$suffix.json" "$@" > "$OUT/bench-$label$suffix.log" 2>&1 \
    || { echo "bench $label failed:"; tail -5 "$OUT/bench-$label$suffix.log"; }
  ((round == 1)) && LABELS+=("$label")
  sleep 1  # let the power draw settle between processes, as FA3's script does
}
for ((round = 1; round <= ROUNDS; round++)); do
  suffix=""  # round 1 keeps the file names of a single round
  ((round > 1)) && suffix=".r$round"
  for pair in ${PATHS:-hopper= sm80=--sm80 l4=--l4}; do
    flags=${pair#*=}
    read -ra flag_list <<< "${flags//,/ }"
    bench "${pair%%=*}" "$suffix" "$PYTHONPATH" "${flag_list[@]}" "$@"
  done
  for pair in ${TREES:-}; do
    bench "${pair%%=*}" "$suffix" "${pair#*=}:$PYTHONPATH" "$@"
  done
done
grep -h "blocks/SM" "$OUT"/bench-*.log | sort -u
python3 - "$OUT" "$ROUNDS" "${LABELS[@]}" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out, rounds, labels = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def files(label):
    names = [f"bench-{label}.json"] + [f"bench-{label}.r{r}.json" for r in range(2, rounds + 1)]
    return [out / n for n in names if (out / n).is_file()]
runs = {l: [json.loads(f.read_text())["rows"] for f in files(l)] for l in labels}
labels = [l for l in labels if runs[l]]
key = lambda r: (r["dtype"], r["D"], r["causal"], r["S"])
# Per label and config, the median over the label's processes of each figure.
table = {}
for l in labels:
    by_key = {}
    for rows in runs[l]:
        for r in rows:
            by_key.setdefault(key(r), []).append(r)
    table[l] = {
        k: {f: statistics.median(r[f] for r in rs) for f in ("flash", "vs_flash", "vs_cudnn")
            if all(f in r for r in rs)}
        for k, rs in by_key.items()
    }
head = f"{'dtype':9}{'D':>4}{'causal':>7}{'S':>6}"
for l in labels:
    head += f"{l:>9}{'/fl':>7}{'/cud':>7}"
what = "TFLOP/s" if rounds == 1 else f"medians over {rounds} processes per label: TFLOP/s"
print(head + f"   ({what}; /fl, /cud: ratio to sdpa-flash, sdpa-cudnn of the same process)")
for k in table[labels[0]]:
    line = f"{k[0]:9}{k[1]:>4}{k[2]!s:>7}{k[3]:>6}"
    for l in labels:
        r = table[l].get(k, {})
        cells = [r.get("flash", "-"), r.get("vs_flash", "-"), r.get("vs_cudnn", "-")]
        line += "".join(f"{c:>{w}.{p}f}" if c != "-" else f"{c:>{w}}"
                        for c, w, p in zip(cells, (9, 7, 7), (1, 3, 3)))
    print(line)
for l in labels:
    for peer in ("vs_flash", "vs_cudnn"):
        vals = [r[peer] for k, r in table[l].items() if peer in r and k[3] >= 1024]
        if not vals:
            continue
        line = (f"{l:>8} {peer} (S>=1024): median {statistics.median(vals):.3f}, "
                f"min {min(vals):.3f}, max {max(vals):.3f}, {sum(v >= 1 for v in vals)} of "
                f"{len(vals)} >= 1")
        if len(runs[l]) > 1:
            per = [sum(r[peer] >= 1 for r in rows if peer in r and r["S"] >= 1024)
                   for rows in runs[l]]
            line += f" (of the medians; each process: {', '.join(map(str, per))})"
        print(line)
PYEOF
