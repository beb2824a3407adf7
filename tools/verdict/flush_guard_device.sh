#!/usr/bin/env bash
# One device call (issue 48 item 6), from the repository root with .whl/ carried: the GPU test
# that guards the worker's own L2 flush (benches/worker.py, Placement.call), on this tree and
# then on a copy with that flush taken out, where it should fail. Writes both pytest outputs
# under $OUT; prints each one's summary and recorded ratio. About 3 minutes.
set -uo pipefail
out=${OUT:-/tmp/flush_guard}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl 2>&1 | tail -n 3
test=tests/gpu/test_worker_gpu.py::test_a_kernel_in_its_worker_runs_as_fast_as_alone_after_the_harnesss_flush
guarded() {  # tree label
  (cd "$1" && PYTHONPATH="/tmp/site:$1" timeout -k 10 "${PYTEST_TIMEOUT:-240}" python3 -m pytest \
    -q -rfE -p no:cacheprovider -m gpu --junitxml="$out/$2.xml" "$test" > "$out/$2.txt" 2>&1 \
    < /dev/null)
  echo "$2: pytest exit $?"
  grep -E "passed|failed|AssertionError" "$out/$2.txt" | tail -n 3
  grep -o 'name="worker_over_alone" value="[^"]*"' "$out/$2.xml" 2>/dev/null
}
guarded "$PWD" with-flush
unflushed=$(mktemp -d)/tree
cp -r "$PWD" "$unflushed"
sed -i 's/^\( *\)self\.state\.flush\.zero_()$/\1pass  # taken out by flush_guard_device.sh/' \
  "$unflushed/benches/worker.py"
grep -q "taken out by flush_guard" "$unflushed/benches/worker.py" || { echo "flush not found"; exit 1; }
guarded "$unflushed" without-flush
