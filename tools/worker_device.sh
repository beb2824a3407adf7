#!/usr/bin/env bash
# On a GPU host (the device tool's H100), from the repository root: the worker-process path
# of users' kernels on the GPU (tests/gpu/test_worker_gpu.py), then our kernel timed in the
# harness's process against itself through the contract's worker path on the default plan's
# configs (tools/contract_overhead_device.py). Needs pydantic and platformdirs (.whl/) and
# pytest on the host.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/worker-device}
site=${SITE:-/tmp/site}
mkdir -p "$out" "$site"
cd "$repo" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .whl/*.whl
export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_worker_gpu.py 2>&1 \
  | tee "$out/pytest.txt" | tail -n 15
python3 tools/contract_overhead_device.py "$out" --measurements "${MEASUREMENTS:-600}" 2>&1 \
  | tail -n 30
