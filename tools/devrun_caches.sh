#!/usr/bin/env bash
# One device call (developer tool, issue 13): the real `bench` CLI on the local backend with
# the default plan, twice with one fresh state dir: the first run finds the store's caches
# empty, the second finds them warm. Then the environment cache's save/restore on a
# torch-sized venv through the same partial functions and the local store. Short table last.
# `tools/devrun_caches.sh envcache` runs only the second part (and times the build's key).
# Needs the wheels in .whl/ (pydantic & co. are not on the device image).
set -euo pipefail
only=${1:-all}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
scratch=$(mktemp -d /tmp/bench-caches.XXXXXX)
export PYTHONPATH="/tmp/site:$PWD" BENCH_STATE_DIR="$scratch/state" PYTHONUNBUFFERED=1
out=${OUT:-/tmp/bench-out}
mkdir -p "$out"
bench() { python3 -m orchestrator "$@"; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cli_runs() {
for round in cold warm; do
  start=$(date +%s.%N)
  bench launch --backend local --plan "${PLAN:-default}" --budget 1.00 --wait | tail -n 4
  echo "round $round: launch --wait took $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}') s"
done
bench fetch --all --dest "$scratch/results" | tail -n 4
mapfile -t runs < <(ls "$scratch/results")
for i in 0 1; do
  cp "$scratch/results/${runs[$i]}/manifest.json" "$out/manifest-$i.json"
  grep -h "cache:\|phase .*: done\|environment:" "$scratch/results/${runs[$i]}/logs/startup.log" \
    > "$out/cachelog-$i.txt" || true
done
bench render --backend local --plan "${PLAN:-default}" 2>"$out/render-estimate.txt" >/dev/null
bench prices > "$out/prices.txt"
}
[[ "$only" == envcache ]] || cli_runs

# The environment cache on a torch-sized tree: a venv holding this machine's torch and the
# NVIDIA libraries beside it, saved and restored with the startup script's own functions.
python3 - "$scratch" <<'PY'
import sys
from pathlib import Path
from orchestrator.render import template_environment
env, root = template_environment(), Path(sys.argv[1])
(root / "cache.sh").write_text(env.get_template("partials/cache.sh.j2").render())
(root / "store.sh").write_text(
    env.get_template("partials/backend/local.sh.j2").render(store_root=str(root / "store2"))
)
PY
site=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
python3 -m venv --without-pip "$scratch/venv"
venv_site=$(echo "$scratch"/venv/lib/python3*/site-packages)
for package in torch nvidia triton numpy; do
  [[ -d "$site/$package" ]] && cp -a "$site/$package" "$venv_site/"
done
export WORK_DIR="$scratch"
(
  cd "$scratch"
  log() { printf '[bench] %s\n' "$*"; }
  export -f log
  # shellcheck disable=SC1091
  source store.sh; source cache.sh
  export -f store_put store_get
  echo "zstd: $(command -v zstd || echo absent); tree: $(du -sb venv | cut -f1) bytes"
  timeout 200 bash -c 'cache_save venv env/devrun && cache_restore env/devrun restored'
  if diff -q <(cd venv && find . -type f -printf '%P %s\n' | sort) \
      <(cd restored && find . -type f -printf '%P %s\n' | sort) >/dev/null; then
    echo "restored venv: same files and sizes ($(find restored -type f | wc -l) files)"
  fi
) 2>&1 | tee "$out/envcache.txt"

start=$(date +%s.%N)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
key=$(python3 -m kernels.flash_attention.build --print-cache-key --arch "$arch")
echo "build cache key $key from nvidia-smi's $arch in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}') s" \
  | tee -a "$out/envcache.txt"
[[ "$only" == envcache ]] && exit 0
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = [json.loads((out / f"manifest-{i}.json").read_text()) for i in (0, 1)]
print(f"{'phase':<12} {'cold s':>7} {'warm s':>7}")
for name in [p["name"] for p in rows[0]["phases"]]:
    cells = [next((p["seconds"] for p in r["phases"] if p["name"] == name), None) for r in rows]
    print(f"{name:<12} {cells[0]:>7} {cells[1]:>7}")
for r in rows:
    print(r["run_id"], r["status"], "build cached:", (r.get("kernel_build") or {}).get("cached"),
          "build s:", round((r.get("kernel_build") or {}).get("seconds", 0), 2),
          "env source:", (r.get("environment") or {}).get("environment_source"))
PY
cat "$out"/cachelog-*.txt | grep "cache:" || true
grep "cache:\|zstd\|restored venv\|cache key" "$out/envcache.txt" || true
