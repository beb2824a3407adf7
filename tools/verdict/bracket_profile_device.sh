#!/usr/bin/env bash
# One device call (issue 48, item 6): where a worker's sample spends the host's time
# (tools/verdict/bracket_profile.py), from the repository root. Needs the wheels of .whl/.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
out=${OUT:-/tmp/bracket_profile}
mkdir -p "$out"
OUT=$out python3 tools/verdict/bracket_profile.py 2>&1 | tee "$out/bracket_profile.log" | tail -n 150
