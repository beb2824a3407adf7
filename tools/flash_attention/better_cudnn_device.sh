#!/usr/bin/env bash
# Issue 53 item 2 on the H200 in one device call (carry .whl and .whl-cudnn): the flash GPU
# correctness tests (the plan's own, test_hopper_plan_fills_the_last_round, among them), then
# tools/flash_attention/better_cudnn.py in N processes (default 3: the FA grid with D = 256 and
# GQA; about 55 s each with the ragged sweep, no longer measured by default) and its summary,
# printed last. NOTES.md, "session 19" and "session 21".
# Usage (repo root, on the GPU machine): [N=3] bash tools/flash_attention/better_cudnn_device.sh
set -uo pipefail
out=${OUT:-/tmp/better-cudnn}
site=/tmp/site
mkdir -p "$out" "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
  .whl/*.whl .whl-cudnn/*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH="$site:$PWD:$PWD/tools/flash_attention" PYTHONUNBUFFERED=1
timeout -k 5 290 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_flash_correctness.py \
  > "$out/correctness.txt" 2>&1
echo "correctness exit $?: $(tail -n 1 "$out/correctness.txt")"
grep -E "^FAILED" "$out/correctness.txt" | head -5
for i in $(seq 1 "${N:-3}"); do
  timeout -k 5 140 python3 tools/flash_attention/better_cudnn.py measure "$out/p$i.json" \
    > "$out/p$i.txt" 2>&1
  echo "process $i exit $?"
done
python3 tools/flash_attention/better_cudnn.py summarize "$out"/p*.json > "$out/summary.txt" 2>&1
sed -n '/^grid:/,$p' "$out/summary.txt"
