#!/usr/bin/env bash
# One device call for issue 34 items 2-3 (NOTES.md, 2026-11-25): grouped-query attention and
# head dim 256. Steps (STEPS): test (TEST_K selects tests, empty: the whole file, every path),
# ab (the L4 path, old tree against this one, in one process: ab.py; AB_SETS picks the
# configs), sass (the sm_80 kernels' SASS of both builds, function by function), gqa and d256
# (bench.py against every SDPA backend that takes the shape, Hopper and L4 paths), test256 and
# ab256 (the L4 path's D=256 candidate shape 2: its tests, and in one process against shape 1),
# sanitize (memcheck on tails.py, GQA shapes). Everything under $OUT is packed into round3.tgz.
# Usage (repo root, GPU machine): BASE=.ab_base bash tools/flash_attention/round3.sh
# BASE: a directory holding the old kernels/ (git archive HEAD kernels | tar -x -C DIR).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD:$PWD/tools/flash_attention
export FLASH_KERNEL_CACHE=${FLASH_KERNEL_CACHE:-/tmp/flash-cache}
OUT=${OUT:-/tmp/flash-out}
BASE=${BASE:-.ab_base}
STEPS=${STEPS:-test,ab,sass,gqa,d256}
REPS=${REPS:-40}
TEST_K=${TEST_K-grouped_query or l4_variant or sm80_path}
AB_SETS=${AB_SETS:---head-dim 128;--head-dim 128 --causal;--head-dim 64;--head-dim 64 --causal}
AB_SEQLENS=${AB_SEQLENS:-1024,2048,4096,16384}
L4_SWITCHES="FLASH_EMULATE_SMEM_PER_SM=102400 FLASH_DISABLE_SM90=1"
mkdir -p "$OUT"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv,noheader | tee -a "$OUT/gpu.txt"
python3 -m kernels.flash_attention.build >/dev/null || exit 1
if has test; then
  timeout 300 python3 -m pytest tests/gpu/test_flash_correctness.py -q --noconftest \
    -p no:cacheprovider -W ignore ${TEST_K:+-k "$TEST_K"} > "$OUT/pytest.log" 2>&1
  echo "test: rc=$? $(tail -1 "$OUT/pytest.log")"
fi
if has test256; then
  FLASH_TEST_SWITCHES="$L4_SWITCHES FLASH_COMPACT_SHAPE_D256=2" timeout 200 python3 -m pytest \
    tests/gpu/test_flash_correctness.py -q --noconftest -p no:cacheprovider -W ignore \
    -k "d256 and (test_matches_reference or grouped_query or any_finite)" \
    > "$OUT/pytest-d256-shape2.log" 2>&1
  echo "test256 (L4, D=256 shape 2): rc=$? $(tail -1 "$OUT/pytest-d256-shape2.log")"
fi
ab() {  # ab.py builds and args; its table printed, its log appended to $OUT/ab.log
  timeout 200 python3 tools/flash_attention/ab.py "$@" > "$OUT/ab.log.tmp" 2>&1
  echo "ab [$*]: rc=$?"; sed -n '/^ *build/,$p' "$OUT/ab.log.tmp"
  cat "$OUT/ab.log.tmp" >> "$OUT/ab.log"
}
if has ab; then
  IFS=';' read -ra sets <<< "$AB_SETS"
  for args in "${sets[@]}"; do
    read -ra arg_list <<< "$args"
    ab --build "old@$BASE=" --build new= --seqlens "$AB_SEQLENS" --reps 60 "${arg_list[@]}"
  done
fi
if has ab256; then
  for causal in "" "--causal"; do
    ab --build shape1=FLASH_COMPACT_SHAPE_D256=1 --build shape2=FLASH_COMPACT_SHAPE_D256=2 \
      --head-dim 256 --seqlens 1024,4096,16384 --reps 40 $causal
  done
fi
if has sass; then
  python3 - "$BASE" <<'PYEOF' 2>&1 | tee "$OUT/sass.txt"
import os, re, subprocess, sys
from pathlib import Path
# The L4 builds ab.py made, the old tree's and this one's: each tree's own cache key.
def l4_key(root):
    code = ("from kernels.flash_attention import build as b; print(b.cache_key(b.source_sha256(), "
            "b.nvcc_version(b.find_nvcc()), 'sm_90', b.define_flags({'FLASH_EMULATE_SMEM_PER_SM': "
            "102400, 'FLASH_DISABLE_SM90': 1})))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, check=True).stdout.strip()
libs = [f"/tmp/flash-cache/{l4_key(root)}/libflash_attention.so" for root in (sys.argv[1], ".")]
def functions(lib):
    text = subprocess.run(["cuobjdump", "-sass", lib], capture_output=True, text=True).stdout
    out = {}
    for part in re.split(r"\n\s+Function : ", text)[1:]:
        name, body = part.split("\n", 1)
        if "flash_fwd_kernel" not in name or "sm90" in name:
            continue
        ops = [re.sub(r"/\*[0-9a-f]+\*/|;.*", "", l).strip() for l in body.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", l)]
        # Kernel parameter offsets moved (the params struct grew): compare opcodes and registers, not c[0x0][...] offsets.
        # Keyed by the template arguments: the parameter list changed (FwdKernelParams).
        out[re.sub(r"EEEv.*", "", name)] = [re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[P]", o) for o in ops]
    return out
print("libraries:", libs[-2:])
a, b = functions(libs[-2]), functions(libs[-1])
for name in sorted(set(a) & set(b)):
    same = sum(x == y for x, y in zip(a[name], b[name]))
    ldl = [sum("LDL" in o or "STL" in o for o in f[name]) for f in (a, b)]
    print(f"{len(a[name]):6} {len(b[name]):6} identical {same:6}  LDL/STL {ldl}  {name[:110]}")
PYEOF
fi
bench() {  # LABEL bench.py args: one process, its table appended to $OUT/tables.txt
  local label=$1; shift
  timeout 200 python3 tools/flash_attention/bench.py --reps "$REPS" --json "$OUT/bench-$label.json" \
    --impls flash,sdpa-flash,sdpa-cudnn,sdpa-efficient "$@" > "$OUT/bench-$label.log" 2>&1
  { echo "== $label: $*"; sed -n '/^dtype/,$p' "$OUT/bench-$label.log"; } >> "$OUT/tables.txt"
}
if has gqa; then
  for path in hopper l4; do
    flag=""; [[ $path == l4 ]] && flag=--l4
    for group in 4 8; do
      bench "gqa-$path-g$group" $flag --head-dims 64,128 --heads 32 --group "$group" \
        --seqlens 1024,4096,16384 --dtypes bfloat16
    done
  done
fi
if has d256; then
  bench d256-hopper --head-dims 256 --seqlens 1024,4096,16384
  bench d256-l4 --l4 --head-dims 256 --seqlens 1024,4096,16384 --dtypes bfloat16
fi
if has sanitize; then
  for defs in "" "--define FLASH_EMULATE_SMEM_PER_SM=102400 --define FLASH_DISABLE_SM90=1"; do
    read -ra def_list <<< "$defs"
    python3 tools/flash_attention/tails.py "${def_list[@]}" >/dev/null 2>&1  # build first
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck \
      python3 tools/flash_attention/tails.py "${def_list[@]}" > "$OUT/memcheck.log" 2>&1
    echo "memcheck [$defs]: rc=$? $(grep -E 'ERROR SUMMARY|tails:' "$OUT/memcheck.log" | tr '\n' ' ')"
  done
fi
[[ -f "$OUT/tables.txt" ]] && cat "$OUT/tables.txt"
tar czf /tmp/round3.tgz -C "$OUT" . && rm -f "$OUT"/* && mv /tmp/round3.tgz "$OUT/"
