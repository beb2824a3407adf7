#!/usr/bin/env bash
# On the device's GPU, from the repository root, .whl/ and .whl-cudnn/ carried: every test
# marked `gpu` (tests/gpu/) on this tree, the kernel's smoke check first. The pass a merged
# tree owes before it is called done (issue 51: the house moved the kernel, the worker and
# the harness; their GPU tests had not run on the merged tree). Writes pytest.txt,
# junit.xml and smoke.txt under $OUT; prints the smoke's last lines and pytest's summary.
# About 6-9 minutes with a cold kernel cache; PYTEST_TIMEOUT bounds the pytest part.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gpu-suite}
site=${SITE:-/tmp/site}
mkdir -p "$out" "$site"
cd "$repo" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
  .whl/*.whl .whl-cudnn/*.whl 2>&1 | tail -n 3
export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
start=$(date +%s)
python3 -m kernels.flash_attention.smoke > "$out/smoke.txt" 2>&1
echo "smoke exit $? in $(( $(date +%s) - start )) s"
tail -n 4 "$out/smoke.txt"
# TESTS may name several paths: split on purpose. Into a file, not a pipe: a worker that
# outlives a killed pytest keeps a pipe open, and the call then waits out its whole limit
# (session 15 lost a call so, with nothing to read).
# shellcheck disable=SC2086
timeout -k 10 "${PYTEST_TIMEOUT:-480}" python3 -m pytest -q -rfE -p no:cacheprovider -m gpu \
  --junitxml="$out/junit.xml" --durations=15 ${TESTS:-tests/gpu} > "$out/pytest.txt" 2>&1 \
  < /dev/null
echo "pytest exit $?"
grep -E "passed|failed|error|FAILED|ERROR|^[0-9.]+s " "$out/pytest.txt" | tail -n 40
