#!/usr/bin/env bash
# Issue 53 items 3-4 on the H200 in one device call (carry .whl and .whl-cudnn): our kernel and
# cuDNN at the published records' shapes, by the records' own method, sustained and unflushed
# (tools/flash_attention/records.py), in N processes (default 3), then Nsight Compute on our
# kernels at the headline shapes with the clocks left to the board (--clock-control none, as
# `bench launch --profile` runs it): the tensor pipe's measured FLOPs, the kernel's time and its
# SM clock. The summary and the ncu figures are printed last; everything is under $OUT.
# Usage (repo root, on the GPU machine): [N=3] [CASES=a,b] [NCU_CASES="a b"] bash \
#   tools/flash_attention/records_device.sh
set -uo pipefail
out=${OUT:-/tmp/records}
site=/tmp/site
mkdir -p "$out" "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
  .whl/*.whl .whl-cudnn/*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH="$site:$PWD:$PWD/tools/flash_attention" PYTHONUNBUFFERED=1
tool=tools/flash_attention/records.py
start=$(date +%s)
python3 -c "from kernels.flash_attention import load_library; load_library()" \
  > "$out/build.txt" 2>&1
echo "build exit $? in $(($(date +%s) - start)) s"
cases=()
[ -n "${CASES:-}" ] && cases=(--cases "$CASES")
for i in $(seq 1 "${N:-3}"); do
  timeout -k 5 200 python3 "$tool" measure "$out/p$i.json" "${cases[@]}" > "$out/p$i.txt" 2>&1
  echo "process $i exit $?"
  tail -n 3 "$out/p$i.txt" | grep -E "Error|error" | head -3
done
python3 "$tool" summarize "$out"/p*.json > "$out/summary.txt" 2>&1
metrics="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
metrics+=",regex:sm__ops_path_tensor_src_(fp16|bf16|fp8).*\.sum"
for c in ${NCU_CASES:-gqa-d128-16k mha-d256-16k fp8-gqa-d128-16k}; do
  timeout -k 5 120 ncu --clock-control none --launch-skip 2 --launch-count 1 \
    -k regex:flash_fwd --metrics "$metrics" python3 "$tool" probe "$c" \
    > "$out/ncu-$c.txt" 2>&1
  echo "ncu $c exit $?"
done
cat "$out/summary.txt"
for c in ${NCU_CASES:-gqa-d128-16k mha-d256-16k fp8-gqa-d128-16k}; do
  echo "== ncu $c"
  grep -E "gpu__time_duration|sm__cycles_elapsed|sm__ops_path" "$out/ncu-$c.txt"
done
