#!/usr/bin/env bash
# Issue 34's first acceptance bullet in N processes (NOTES.md, "2026-11-30"): acceptance.sh's
# hopper step (the 40-config grid, ours against cuDNN with the tree under BASE alongside, one
# process) N times in turn, then per cell the median over the processes of ours/cuDNN, the
# min and max, the median of new/before and the range of the A/A row; the grid's figures from
# the per-cell medians. Logs of every process in one archive (the device returns at most 8
# files), the table (table_n.txt) beside it and printed last.
# Usage (repo root, GPU machine): BASE=DIR [N=5] [REPS=40] bash tools/flash_attention/acceptance_n.sh
set -uo pipefail
O=${OUT:-/tmp/flash-out}
BASE=${BASE:?the tree before: a directory holding kernels/}
N=${N:-5}
WORK=$(mktemp -d)
mkdir -p "$O"
for i in $(seq 1 "$N"); do
  start=$SECONDS
  OUT="$WORK/p$i" STEPS=hopper bash tools/flash_attention/acceptance.sh > "$WORK/p$i.log" 2>&1
  echo "process $i: rc=$? $((SECONDS - start)) s"
  mkdir -p "$WORK/p$i/x" && tar -xzf "$WORK/p$i/logs.tgz" -C "$WORK/p$i/x" hopper/ab.json
done
python3 - "$WORK" "$N" > "$O/table_n.txt" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
work, n = Path(sys.argv[1]), int(sys.argv[2])
runs = []
for i in range(1, n + 1):
    path = work / f"p{i}" / "x" / "hopper" / "ab.json"
    if path.is_file():
        runs.append(json.loads(path.read_text())["rows"])
key = lambda r: (r["dtype"], r["D"], r["causal"], r["S"])
cells = [key(r) for r in runs[0]]
by = [{key(r): r for r in rows} for rows in runs]
med = lambda xs: statistics.median(list(xs)) if xs else float("nan")
# cuDNN's own speed moves between machines by more than ours (NOTES.md, h35): its TFLOP/s
# (ours / the ratio) beside ours lets two calls' tables be compared.
cudnn_tflops = lambda r: r["new"]["tflops"] / r["new"]["vs_cudnn"]
print(f"{len(runs)} processes; ours/cuDNN per process, per-cell median (min-max); new/before"
      " median; A/A min-max; ours and cuDNN's TFLOP/s, medians")
print("dtype D causal S | " + " ".join(f"p{i + 1:<5}" for i in range(len(runs)))
      + " | median (min-max) | new/before | A/A | TFLOP/s ours / cuDNN")
medians = {}
for c in cells:
    rows = [b[c] for b in by if c in b]
    v = [r["new"]["vs_cudnn"] for r in rows]
    nb = [1 / r["before"]["vs_base"] for r in rows]
    aa = [r["new-again"]["vs_base"] for r in rows]
    medians[c] = med(v)
    dt = "fp16" if c[0] == "float16" else "bf16"
    print(f"{dt} {c[1]} {'yes' if c[2] else 'no'} {c[3]} | " + " ".join(f"{x:.3f}" for x in v)
          + f" | {med(v):.3f} ({min(v):.3f}-{max(v):.3f}) | {med(nb):.3f} |"
          f" {min(aa):.3f}-{max(aa):.3f} | {med([r['new']['tflops'] for r in rows]):.1f} /"
          f" {med([cudnn_tflops(r) for r in rows]):.1f}")
allv = list(medians.values())
d64 = [v for c, v in medians.items() if c[1] == 64]
nc = [(c, v) for c, v in medians.items() if c[1] == 128 and not c[2] and c[3] >= 4096]
print(f"per-cell medians: grid median {med(allv):.3f}, min {min(allv):.3f},"
      f" below 0.90: {sum(v < 0.9 for v in allv)}, D=64 median {med(d64):.3f}")
print("D=128 non-causal S>=4096 (median, min-max over processes): " + "; ".join(
    f"{'fp16' if c[0] == 'float16' else 'bf16'} {c[3]} {v:.3f}"
    f" ({min(b[c]['new']['vs_cudnn'] for b in by):.3f}-{max(b[c]['new']['vs_cudnn'] for b in by):.3f})"
    for c, v in nc))
for i, b in enumerate(by):
    v = [r["new"]["vs_cudnn"] for r in b.values()]
    w = [r["new"]["vs_cudnn"] for c, r in b.items() if c[1] == 64]
    long = [cudnn_tflops(r) for c, r in b.items() if c[3] >= 8192]
    print(f"process {i + 1}: median {med(v):.3f}, min {min(v):.3f}, D=64 median {med(w):.3f},"
          f" new/before median {med([1 / r['before']['vs_base'] for r in b.values()]):.3f},"
          f" cuDNN TFLOP/s median at S >= 8192 {med(long):.1f}")
PYEOF
(cd "$WORK" && tar -czf "$O/logs.tgz" .)
cat "$O/table_n.txt"
