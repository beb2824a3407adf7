#!/usr/bin/env bash
# One device call (issue 49 item 4), from the repository root with .whl/ carried: where a
# GPU worker's own time gains on the same SDPA in the harness's process
# (tools/verdict/own_time_probe.py), then the GPU test that holds it to 1 % run REPEATS
# times, its ratios and any failure's whole message kept (test_runs.txt under $OUT).
# PROBE=0 skips the probe; run from another tree's root (an older commit's, say), with
# /tmp/site installed already, it tests that tree.
set -uo pipefail
out=${OUT:-/tmp/own_time_probe}
junit=$(mktemp -d)
mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl/*.whl 2>&1 | tail -n 3
fi
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
# PROBE_KERNEL=examples/NAME: that example's tree, copied and built here, is what the probe
# times (PROBE_CALL names its entry; PROBE_CONFIGS and PROBE_ROUNDS as own_time_probe.py says).
if [ -n "${PROBE_KERNEL:-}" ]; then
  PROBE_TREE=$(mktemp -d)/kernel
  cp -r "$PROBE_KERNEL" "$PROBE_TREE"
  (cd "$PROBE_TREE" && python3 setup.py build_ext --inplace) > "$out/build.log" 2>&1 \
    || { echo "the example did not build:"; tail -n 5 "$out/build.log"; exit 1; }
  export PROBE_TREE
fi
if [ "${PROBE:-1}" != 0 ]; then
  python3 tools/verdict/own_time_probe.py "$out/own_time_probe.json" \
    > "$out/own_time_probe.log" 2>&1
  tail -n 8 "$out/own_time_probe.log"
fi
for i in $(seq "${REPEATS:-6}"); do
  timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -p no:randomly \
    --junitxml="$junit/$i.xml" \
    "tests/gpu/test_worker_gpu.py::${TEST:-test_a_gpu_workers_sample_is_its_own_time_held_by_the_harnesss_bracket}" \
    > "$junit/$i.txt" 2>&1
  echo "run $i exit $?"
done
python3 - "$out/test_runs.txt" "$junit" <<'PY'
import glob, os, sys, xml.etree.ElementTree as ET
lines = []
for path in sorted(glob.glob(sys.argv[2] + "/*.xml"), key=lambda p: int(os.path.basename(p)[:-4])):
    for case in ET.parse(path).iter("testcase"):
        figure = [(p.get("name"), round(float(p.get("value")), 4)) for p in case.iter("property")]
        failed = [f.get("message", "") + "\n" + (f.text or "")[-3000:]
                  for kind in ("failure", "error") for f in case.iter(kind)]
        lines.append(f"run {os.path.basename(path)[:-4]}: {figure} {'FAILED' if failed else 'passed'}")
        lines += failed
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print("\n".join(l for l in lines if l.startswith("run ")))
PY
