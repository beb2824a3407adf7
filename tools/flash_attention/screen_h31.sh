#!/usr/bin/env bash
# One device call of NOTES.md "2026-11-30" (h31, pairs of blocks sharing K/V by TMA multicast):
# how many clusters of two the GPU runs at once (cluster_probe.cu), the builds (the tree
# before, the shipped one, h31's switch off), the new build's tail shapes and memcheck, the
# D = 128 non-causal cells of the tree before and the new one side by side with cuDNN (ab.py
# through item1.sh, the tree before timed twice: the A/A row), then the SM clock, board power and
# cycles per call of ours with the switch off and on, one process each, in turns
# (dtype_power.py). BASE: the tree before. h31 was not kept: the switch FLASH_SM90_CLUSTER exists only
# with tools/flash_attention/wip/h31-cluster-kv-multicast.patch applied (git apply).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD:$PWD/tools/flash_attention
export FLASH_KERNEL_CACHE=/tmp/flash-cache-item1
export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} -Xcompiler=-fno-gnu-unique"
O=${OUT:-/tmp/flash-out}
BASE=${BASE:?the tree before}
mkdir -p "$O"
nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/cluster_probe \
  tools/flash_attention/cluster_probe.cu && /tmp/cluster_probe | tee "$O/probe.txt"
python3 -m kernels.flash_attention.build --define FLASH_SM90_CLUSTER=1 > "$O/build-off.log" 2>&1 &
OUT=$O BUILDS="head@$BASE= new=" TAILS="new" MEMCHECK="new" PEERS=sdpa-cudnn \
  STEPS=prebuild,tails,memcheck,ab AB_TIMEOUT=200 bash tools/flash_attention/item1.sh \
  --reps "${REPS:-60}" --head-dims 128 --causal no
wait
for build in off new off new; do
  defs=()
  [[ $build == off ]] && defs=(--define FLASH_SM90_CLUSTER=1)
  echo "[$build]" >> "$O/power.txt"
  timeout 60 python3 tools/flash_attention/dtype_power.py "${defs[@]}" --impls flash \
    --kinds fp16,bf16 --seconds 2 --rounds 1 >> "$O/power.txt" 2>&1
done
# The device returns at most 8 files: every log into one archive, the tables beside it.
(cd "$O" && find . -type f ! -name table.txt ! -name power.txt ! -name probe.txt \
  ! -name logs.tgz -printf '%P\n' | tar -czf logs.tgz -T - --remove-files)
cat "$O/probe.txt" "$O/power.txt" "$O/table.txt"
