#!/usr/bin/env bash
# One device call (issue 48 item 6), from the repository root with .whl/ and .old2/ (the
# pre-harness tree) carried: every honest kernel of item 6 through the harness against the
# pre-harness tree. Our kernel on the default plan (three launches of each tree,
# alternating), then torch-attention and triton-attention on the examples' plan (one of
# each); each part's table under $OUT/<part>/agreement.txt, and printed. cuda-extension
# (a 66 s build a tree) runs alone: KERNEL=examples/cuda-extension ... agreement_device.sh.
# About 8 minutes; PART_TIMEOUT bounds each part.
set -uo pipefail
out=${OUT:-/tmp/item6}
repo=$PWD
part() {  # name, then the environment of agreement_device.sh
  local name=$1
  shift
  mkdir -p "$out/$name"
  env "$@" OUT="$out/$name" TESTS=0 timeout -k 5 "${PART_TIMEOUT:-300}" \
    bash "$repo/tools/verdict/agreement_device.sh" > "$out/$name/log.txt" 2>&1
  echo "== $name: exit $?"
  # the table over every run where a tree launched more than once, else the last pair's
  if grep -q "^over every run" "$out/$name/agreement.txt" 2>/dev/null; then
    sed -n '/^over every run/,$p' "$out/$name/agreement.txt"
  else
    tail -n 12 "$out/$name/agreement.txt" 2>/dev/null || tail -n 12 "$out/$name/log.txt"
  fi
}
part ours ORDER="new old2 new old2 new old2"
for example in torch-attention triton-attention; do
  part "$example" KERNEL="examples/$example" IDENTITY="$example" \
    PLAN="$repo/tools/verdict/examples-plan.json" ORDER="new old2"
done
