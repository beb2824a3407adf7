#!/usr/bin/env bash
# One device call of NOTES.md "2026-11-29, later": the builds, the dtype/power probe (lead a),
# then the switch builds side by side with the tree before (ab.py through item1.sh). The call
# also timed h30 (ptxas level 3 for the D = 128 units, switch FLASH_SM90_REG_LEVEL_D128), whose
# switch was removed after it. BASE: the tree before (default: the one of that call).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD:$PWD/tools/flash_attention
export FLASH_KERNEL_CACHE=/tmp/flash-cache-item1
O=${OUT:-/tmp/flash-out}
BASE=${BASE:-.ab_base/r3s7b}
B="head@$BASE= p1=FLASH_SM90_P_BUFFERS=1"
OUT=$O BUILDS="shipped= $B" TAILS="p1" STEPS=prebuild,tails bash tools/flash_attention/item1.sh
timeout 90 python3 tools/flash_attention/dtype_power.py --seconds 2 --rounds 2 2>&1 | tee "$O/power.txt"
OUT=$O BUILDS="$B" PEERS=sdpa-cudnn STEPS=ab AB_TIMEOUT=200 bash tools/flash_attention/item1.sh --reps 40
timeout 40 python3 tools/flash_attention/ab.py --build "head@$BASE=" --build p1=FLASH_SM90_P_BUFFERS=1 \
  --no-l4 --peers sdpa-cudnn --head-dims 64 --seqlens 1024 --dtypes float16 --reps 300 > "$O/ab1k.log" 2>&1
tail -6 "$O/ab1k.log"
cat "$O/power.txt"
