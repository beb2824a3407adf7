#!/usr/bin/env bash
# One device call of NOTES.md "h32-h34" (the row sums): the builds (shipped;
# h32 the row sums as four partial sums, with and without four partial maxima; h33 the tensor
# core's row sums for bf16 too), their tail shapes, the 40 cells against cuDNN side by side (ab.py
# through item1.sh, the shipped build timed twice: the A/A row), then the worst lse and output
# errors over the GPU tests' shapes (precision.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD:$PWD/tools/flash_attention
export FLASH_KERNEL_CACHE=/tmp/flash-cache-item1
export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} -Xcompiler=-fno-gnu-unique"
O=${OUT:-/tmp/flash-out}
mkdir -p "$O"
BUILDS=${BUILDS:-"head= s4=FLASH_SM90_TREE_SUM=2 s4m=FLASH_SM90_TREE_SUM=2,FLASH_SM90_TREE_MAX=2 rs3=FLASH_SM90_ROW_SUM=3"}
OUT=$O BUILDS="$BUILDS" TAILS="${TAILS:-s4 s4m rs3}" PEERS=sdpa-cudnn \
  STEPS=prebuild,tails,ab AB_TIMEOUT=${AB_TIMEOUT:-300} bash tools/flash_attention/item1.sh \
  --reps "${REPS:-40}" "$@"
builds=()
for pair in $BUILDS; do [[ ${pair%%=*} == *@* ]] || builds+=(--build "$pair"); done
timeout 120 python3 tools/flash_attention/precision.py "${builds[@]}" --dtypes bfloat16 \
  --head-dims 64 --draws 3 > "$O/precision.txt" 2>&1
timeout 60 python3 tools/flash_attention/precision.py --build head= --dtypes float16 \
  --head-dims 64 --draws 3 >> "$O/precision.txt" 2>&1
(cd "$O" && find . -type f ! -name table.txt ! -name precision.txt ! -name logs.tgz \
  -printf '%P\n' | tar -czf logs.tgz -T - --remove-files)
cat "$O/precision.txt" "$O/table.txt"
