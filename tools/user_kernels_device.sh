#!/usr/bin/env bash
# On a GPU host (the device tool's H100): each example kernel repository of examples/, made a
# git repository of its own outside this checkout, through `bench launch --backend local
# --kernel DIR --wait` on a small GPU plan, then fetched; a table of the summaries last.
# Needs the payload's python (torch) plus pydantic and platformdirs on PYTHONPATH.
# The host reaches no package index: a contract's pinned requirements are dropped here
# (the host's own triton serves), which the table says.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/user-kernels}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo"
mkdir -p "$out"

python3 - "$repo/benches/plans/default.json" "$work/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
keep = {"fp16-b1h8s512d64-causal", "fp16-b4h16s1024d64", "bf16-b2h16s4096d128", "bf16-b4h16s1024d128-causal"}
configs = [c for c in plan["configs"] if c["name"] in keep] or plan["configs"][2:6]
plan.update(name="examples-gpu", configs=configs, samples_per_config=20, placements=4)
json.dump(plan, open(sys.argv[2], "w"), indent=1)
EOF

for example in torch-attention triton-attention cuda-extension; do
  tree="$work/$example"
  cp -r "$repo/examples/$example" "$tree"
  sed -i '/^requirements = /d' "$tree/bench-kernel.toml"
  git -C "$tree" init -q && git -C "$tree" add -A \
    && git -C "$tree" -c user.name=t -c user.email=t@t commit -qm example
  log="$out/$example.log"
  (cd "$work" && python3 -m orchestrator launch --backend local --kernel "$tree" ${PEERS:+--peers "$PEERS"} \
      --plan "$work/plan.json" --budget 1 --wait) > "$log" 2>&1
  echo "launch $example: exit $?" | tee -a "$out/summary.txt"
  run=$(grep -o 'launched run [0-9a-f-]*' "$log" | head -1 | cut -d' ' -f3)
  (cd "$work" && python3 -m orchestrator fetch "$run" --dest "$work/results") >> "$log" 2>&1
  echo "fetch $example ($run): exit $?" | tee -a "$out/summary.txt"
  cp "$work/results/$run/results/summary.csv" "$out/$example-summary.csv" 2>/dev/null
  cp "$work/results/$run/results/correctness.csv" "$out/$example-correctness.csv" 2>/dev/null
done
python3 - "$out" <<'EOF'
import csv, glob, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-summary.csv"))):
    print(os.path.basename(path))
    for row in csv.DictReader(open(path)):
        keys = [k for k in ("config", "implementation", "versus", "median_ms", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict") if k in row]
        print("  " + "  ".join(str(row[k])[:28] for k in keys))
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-correctness.csv"))):
    rows = list(csv.DictReader(open(path)))
    bad = [r for r in rows if r.get("passed") not in ("True", "true")]
    print(os.path.basename(path), len(rows), "rows,", len(bad), "not passed:",
          sorted({(r.get("implementation"), (r.get("message") or "")[:60]) for r in bad})[:6])
EOF
cat "$out/summary.txt"
