#!/usr/bin/env bash
# Issue 54 item 7, on the device's GPU, from the repository root, .whl/ carried (pydantic &
# co.: the device image lacks them). Not yet run (the session that wrote it had spent its
# GPU time); two calls, each under the 600 s a call may take:
#
#   PHASE=together bash tools/variants_device.sh    # the 8-variant run, twice
#   PHASE=separate bash tools/variants_device.sh    # the same 8 variants, one run each
#
# The Triton example (examples/triton-attention) with eight tiles declared as variants
# ([kernel.variants], BLOCK_M x BLOCK_N, build_shared: Triton reads them at its first
# call), on a lean plan (CONFIGS of the example's plan, SAMPLES each). `together` times all
# eight in one run, twice (the ranking's stability: the same best, or a tie both times);
# `separate` times each in a run of its own. Each prints its launch wall times, and the
# runtime model's cost of the same launch on a spot L4 comes from DRY=1 (`bench render
# --backend gce`, no project needed, needs the google clients the device lacks); everything
# else is under $OUT. The device reaches no package index: the example's pinned Triton is
# dropped from the copies (the device's own Triton serves). Put the figures in
# docs/variants.md and the issue's note.
set -uo pipefail
PHASE=${PHASE:-together}
SAMPLES=${SAMPLES:-30}
CONFIGS=${CONFIGS:-4}
TILES=${TILES:-"32x32 32x64 64x32 64x64 64x128 128x32 128x64 128x128"}
RUNS=${RUNS:-2}  # how many times `together` runs the eight
repo=$PWD
out=${OUT:-/tmp/variants}
mkdir -p "$out"
if [ "${DRY:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$repo"
  bench=(python3 -m orchestrator)
else  # DRY=1: the trees and the L4 costs only, on any machine with the repository's .venv
  bench=("$repo/.venv/bin/bench")
fi
export PYTHONUNBUFFERED=1
work=$(mktemp -d /tmp/variants.XXXXXX)
export BENCH_STATE_DIR="$work/state"

# tree NAME TILE...: the example, its plan cut to CONFIGS configs of SAMPLES samples, the
# tiles as variants; a git repository of one commit (bench reads a tree as git lists it).
tree() {
  local name=$1 dir="$work/$1"
  shift
  cp -r "$repo/examples/triton-attention" "$dir"
  python3 - "$dir" "$CONFIGS" "$SAMPLES" "$@" <<'PY' || exit 1
import json, sys
from pathlib import Path
root, configs, samples, tiles = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
plan = json.loads((root / "bench-plan.json").read_text())
plan["configs"] = plan["configs"][:configs]
plan["samples_per_config"] = samples
(root / "bench-plan.json").write_text(json.dumps(plan, indent=1))
lines = ["", "[kernel.variants]"]
for tile in tiles:
    m, n = tile.split("x")
    lines.append(f'm{m}n{n} = {{ env = {{ BLOCK_M = "{m}", BLOCK_N = "{n}" }} }}')
contract = (root / "bench-kernel.toml").read_text()
head, _, supports = contract.partition("[kernel.supports]")
head = head.rstrip() + "\nbuild_shared = true\n" + "\n".join(lines) + "\n\n"
# The device reaches no package index: the pinned Triton is dropped there (its own serves).
head = "\n".join(l for l in head.splitlines() if not l.startswith("requirements = ")) + "\n"
(root / "bench-kernel.toml").write_text(head + "[kernel.supports]" + supports)
PY
  git -C "$dir" init -q && git -C "$dir" add -A &&
    git -C "$dir" -c user.name=bench -c user.email=bench@localhost commit -qm "$name" || exit 1
}

l4_cost() {  # the runtime model's cost of launching this tree on a spot L4
  "${bench[@]}" render --backend gce --kernel "$1" --budget 1.00 2>&1 >/dev/null |
    awk '/^cost /{print $2}'
}

launch() {  # DIR LABEL
  local start end
  start=$(date +%s.%N)
  "${bench[@]}" launch --backend local --kernel "$1" --budget 1.00 --wait --fetch \
    --dest "$work/results" --json > "$out/$2.json" 2> "$out/$2.log"
  local code=$?
  end=$(date +%s.%N)
  echo "$2: exit $code, $(python3 -c "print(round($end - $start, 1))") s" |
    tee -a "$out/walls.txt"
}

if [ "$PHASE" = together ]; then
  # shellcheck disable=SC2086  # TILES is a list of words
  tree all $TILES
  [ "${DRY:-0}" = 1 ] && { echo "L4 cost, 8 variants in one run: $(l4_cost "$work/all")"; exit 0; }
  for i in $(seq "$RUNS"); do launch "$work/all" "together-$i"; done
  for i in $(seq "$RUNS"); do
    run=together-$i
    python3 - "$work/results" "$out/$run.json" <<'PY'
import json, sys
from pathlib import Path
text = Path(sys.argv[2]).read_text().strip() or "{}"
launched, _ = json.JSONDecoder().raw_decode(text)  # launch's object first (fetch's may follow)
run_id = launched.get("run_id") or (launched.get("runs") or [{}])[0].get("run_id")
manifest = json.loads((Path(sys.argv[1]) / run_id / "manifest.json").read_text())
ranking = manifest.get("ranking") or {}
print(run_id, "best:", ranking.get("best"), "tied:", ranking.get("tied"), "unranked:",
      [u.get("identity") for u in ranking.get("unranked", [])])
for c in ranking.get("candidates", []):
    g = c["geomean"]
    print(f"  {c['identity']}: {g['speedup']:.3f}x [{g['ci_low']:.3f}, {g['ci_high']:.3f}]")
PY
  done | tee "$out/rankings.txt"
else
  for tile in $TILES; do
    tree "one-$tile" "$tile"
    [ "${DRY:-0}" = 1 ] && { echo "$tile: L4 $(l4_cost "$work/one-$tile")"; continue; }
    launch "$work/one-$tile" "separate-$tile"
  done
fi
tar -czf "$out/results.tgz" -C "$work" results 2>/dev/null
cat "$out/walls.txt" 2>/dev/null
