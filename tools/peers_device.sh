#!/usr/bin/env bash
# On a GPU host (the device tool's H100), from the repository root: the public peers through
# `bench launch --backend local --peers xformers,fa4,flashinfer --wait` on a small GPU plan,
# then fetched; a table of the gate's rows and the summary last.
# The host reaches no package index: xformers comes from a wheel carried in .wheels/ (else
# pip, which fails there and the table says so); fa4 and flashinfer are not installed, so
# their rows show the local backend's "not installed (install ... to time it locally)".
# The PyPI xformers wheel links libcudart.so.12; on a CUDA 13 torch its _C extension loads
# only beside a carried nvidia-cuda-runtime-cu12 wheel (.wheels/ too), else xformers still
# runs the operators that need no _C (its flash operator calls torch's own FA2).
# Needs the payload's python (torch) plus pydantic and platformdirs (wheels in .whl/).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/peers-device}
work=$(mktemp -d)
site=${SITE:-/tmp/site}
mkdir -p "$out" "$site"
cd "$repo" || exit 1

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
fi
if compgen -G ".wheels/xformers-*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .wheels/xformers-*.whl 2>&1 | tail -n 2
else
  python3 -m pip install -q --no-deps --target "$site" xformers==0.0.35 2>&1 | tail -n 2
fi
if compgen -G ".wheels/nvidia_cuda_runtime_cu12-*.whl" >/dev/null \
    && ! python3 -c 'import ctypes; ctypes.CDLL("libcudart.so.12")' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .wheels/nvidia_cuda_runtime_cu12-*.whl
  export LD_LIBRARY_PATH="$site/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export BENCH_STATE_DIR="$work/state" PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
python3 -m xformers.info 2>&1 | grep -E "^xFormers|memory_efficient_attention\.(fa|flsh|cutlass)|is_functorch|build.cuda|_C" \
  | head -n 12 | tee "$out/xformers-info.txt"

python3 - "$repo/benches/plans/default.json" "$work/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
keep = ["fp16-b4h16s1024d64", "bf16-b4h16s1024d128-causal", "bf16-b2h32kv8s4096d128-causal"]
configs = [c for c in plan["configs"] if c["name"] in keep]
plan.update(name="peers-gpu", candidate="sdpa", compared_with=["sdpa-flash", "sdpa-cudnn"],
            control=None, configs=configs, samples_per_config=20, placements=4)
json.dump(plan, open(sys.argv[2], "w"), indent=1)
EOF

log="$out/launch.log"
(cd "$work" && python3 -m orchestrator launch --backend local --plan "$work/plan.json" \
    --peers xformers,fa4,flashinfer --budget 1 --wait) > "$log" 2>&1
echo "launch: exit $?"
run=$(grep -o 'launched run [0-9a-f-]*' "$log" | head -1 | cut -d' ' -f3)
(cd "$work" && python3 -m orchestrator fetch "$run" --dest "$work/results") >> "$log" 2>&1
echo "fetch ($run): exit $?"
tail -n 5 "$log"
cp "$work/results/$run/results/"{summary,correctness,measurements}.csv "$out/" 2>/dev/null
cp "$work/results/$run/logs/"*.log "$out/" 2>/dev/null

python3 - "$out" <<'EOF'
import csv, os, sys
out = sys.argv[1]
def rows(name):
    path = os.path.join(out, name)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []
print("gate (correctness.csv): config  implementation  passed  backend  max_abs_error  message")
for r in rows("correctness.csv"):
    print(" ", r["config"], r["implementation"], r["passed"], r["backend"],
          r.get("max_abs_error", ""), (r.get("message") or "")[:110])
print("summary.csv:")
for r in rows("summary.csv"):
    keys = [k for k in ("config", "implementation", "backend", "median_ms", "versus", "speedup",
                        "verdict") if k in r]
    print("  " + "  ".join(str(r[k])[:40] for k in keys))
EOF
