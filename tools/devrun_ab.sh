#!/usr/bin/env bash
# Developer tool, one device call: the evidence for `bench launch --baseline` and `--profile`.
# The real CLI on the local backend (fresh BENCH_STATE_DIR), default plan, from a throwaway
# git repository made of this tree (the device copy has no .git):
#   1. --baseline HEAD on a clean tree             (A/A: identical sources)
#   2. --baseline SLOW --profile                   (SLOW: kernels/ with a spin of SPIN_CYCLES
#                                                   cycles per key tile: a few % slower)
#   3. --baseline HEAD on a dirty tree             (A/A: an edit outside kernels/)
#   4. --baseline a copy of kernels/ (a path)      (A/A)
# then fetch, report, the verdict counts and one .ncu-rep read back with `ncu --import`.
# STAGE=second: only the slowed baseline (no profile) and the clean A/A.
# Run from this checkout's root with PYTHONPATH holding its dependencies; output under $OUT.
set -uo pipefail
out=${OUT:-/tmp/bench-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 COLUMNS=200
site=${SITE:-/tmp/site}
spin=${SPIN_CYCLES:-40}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
command -v ncu && ncu --version | tail -n 1

scratch=$(mktemp -d /tmp/bench-ab.XXXXXX)
repo=$scratch/repo
mkdir -p "$repo"
tar --exclude=.git --exclude=results -cf - . | tar -xf - -C "$repo"
git -C "$repo" init -q && git -C "$repo" add -A \
  && git -C "$repo" -c user.name=dev -c user.email=dev@localhost commit -qm tree \
  || { echo "git repo setup failed"; exit 1; }

# The slowed baseline: one spin line where a tile's MMAs are issued, in each kernel path (the
# sm_90 consumer's turn at the tensor cores, where the spin cannot hide under the other
# warpgroup's softmax; the sm_80 kernel's barrier that opens each key tile).
mkdir -p "$scratch/slow"
cp -r "$repo/kernels" "$scratch/slow/kernels"
python3 - "$scratch/slow/kernels/flash_attention/csrc" "$spin" <<'EOF'
import sys
csrc, spin = sys.argv[1], sys.argv[2]
line = f"for (long long t0 = clock64(); clock64() - t0 < {spin};) {{}}"
anchors = {  # file: the line after which the spin goes (sm_90: inside the key-tile loop)
    "flash_fwd_sm90_mainloop.cuh": "        turns.take_turn();\n        sm90::wgmma_fence();\n"
    "        qk_wgmma<T, Choices::kDescriptorSteps>(s[0], sm, q_stage, stage, consumer_wg, desc);\n",
    "flash_fwd_kernel.cuh": "        cp_async_wait<0>();\n        __syncthreads();\n",
}
for name, anchor in anchors.items():
    path = f"{csrc}/{name}"
    text = open(path).read()
    assert anchor in text, f"anchor not found in {name}"
    first, rest = anchor.split("\n", 1)
    indent = first[: len(first) - len(first.lstrip())]
    open(path, "w").write(text.replace(anchor, f"{first}\n{indent}{line}\n{rest}"))
EOF
for f in flash_fwd_sm90_mainloop.cuh flash_fwd_kernel.cuh; do
  diff -u "$repo/kernels/flash_attention/csrc/$f" "$scratch/slow/kernels/flash_attention/csrc/$f"
done | tee "$out/slow.diff"
cp -r "$repo/kernels" "$scratch/copy-kernels"

bench() {
  (cd "$repo" && BENCH_STATE_DIR="$scratch/state" PYTHONPATH="$site:$repo" \
    python3 -m orchestrator "$@")
}
launch() {  # launch LABEL ARGS...
  local label=$1 start
  shift
  start=$(date +%s.%N)
  bench launch --backend local --plan default --budget 1.00 --wait "$@" \
    > "$out/launch-$label.txt" 2>&1
  local rc=$?
  echo "$label: exit $rc in $(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),1))" "$start") s: $*"
  grep -E "estimate by phase|phase (build|correctness|benchmark): done|profile:|cache:" \
    "$out/launch-$label.txt" | tail -n 20
}
summarize() {  # summarize: fetch the runs so far, report and tally the newest
  bench fetch --all --dest "$scratch/results" > "$out/fetch.txt" 2>&1
  echo "fetch: exit $?"
  local dir
  dir=$(find "$scratch/results" -mindepth 1 -maxdepth 1 -type d -name '2*' | sort | tail -n 1)
  id=$(basename "$dir")
  bench report "$id" --dest "$scratch/results" > "$out/report-$id.txt" 2>&1
  echo "report $id: exit $?"
  tar -C "$scratch/results" -czf "$out/runs.tgz" --exclude='*.png' .
  python3 - "$dir" <<'EOF'
import csv, json, sys
from collections import Counter
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
plan = m["plan"]
c = plan.get("comparison") or {}
print(" ", c.get("source"), c.get("ref", "")[-40:], (c.get("commit") or "")[:12],
      "dirty" if c.get("candidate_dirty") else "clean",
      "| sources", m["kernel_build"]["source_sha256"][:12], "vs",
      (m.get("baseline_build") or {}).get("source_sha256", "?")[:12],
      "| phases", {p["name"]: p["seconds"] for p in m["phases"]})
rows = list(csv.DictReader(open(d + "/results/summary.csv")))
for who in (c.get("baseline"), plan.get("control") and plan["control"] + "@aa"):
    mine = [r for r in rows if r["implementation"] == who]
    print(f"  {who}: verdicts {dict(Counter(r['verdict'] or r['flag'] for r in mine))}")
    for r in mine:
        print(f"    {r['config']:28} {float(r['speedup']):.4f} "
              f"[{float(r['speedup_ci_low']):.4f}, {float(r['speedup_ci_high']):.4f}] {r['verdict']}")
for o in m.get("comparison") or []:
    print(f"  overall {o['versus']} over {o['identity']}: {o['geomean']:.4f} "
          f"[{o['ci_low']:.4f}, {o['ci_high']:.4f}] {o['verdict']} ({o['configs']} configs)")
gate = [r for r in csv.DictReader(open(d + "/results/correctness.csv")) if not r["passed"] == "true"]
print("  gate failures:", len(gate))
for r in gate[:4]:
    print("   ", r["config"], r["implementation"], r["stage"], r["message"][:200])
EOF
}
readback() {  # the slowed run's report as printed, and one .ncu-rep read back by ncu
  local dir rep
  dir=$(find "$scratch/results" -mindepth 1 -maxdepth 1 -type d -name '2*' | sort | tail -n 1)
  cat "$out/report-$(basename "$dir").txt"
  rep=$(find "$dir/results" -name '*.ncu-rep' | sort | tail -n 1)
  [[ -n "$rep" ]] || { echo "no .ncu-rep came back"; return; }
  cp "$rep" "$dir/results/profile.csv" "$out/"
  ncu --import "$rep" --page raw --csv --print-units base > "$out/raw-page.csv" 2>&1
  ncu --import "$rep" > "$out/ncu-import.txt" 2>&1
  echo "ncu --import $(basename "$rep"): exit $?"
  head -n 45 "$out/ncu-import.txt"
}
if [[ ${STAGE:-all} == second ]]; then  # the slowed baseline again, then one A/A
  launch slow --baseline "$scratch/slow"
  summarize
  launch aa-git-clean --baseline HEAD
  summarize
  exit 0
fi
launch aa-git-clean --baseline HEAD
summarize
launch slow-profile --baseline "$scratch/slow" --profile
summarize
readback
echo "# a dirty tree: an edit outside kernels/" >> "$repo/README.md"
launch aa-git-dirty --baseline HEAD
summarize
launch aa-path --baseline "$scratch/copy-kernels"
summarize
