#!/usr/bin/env bash
# The gate recipe's identical trees (tests/e2e/test_gate_recipe.py), run CONCURRENT at a time
# BATCHES times on this machine (their own load), then tools/verdict/recipe_aa.py's table:
# each run's exit, A/A control and candidate-over-baseline per config, and how often each
# twin followed the other. Usage: tools/verdict/recipe_aa.sh OUT_DIR [CONCURRENT] [BATCHES]
set -euo pipefail
out=${1:?an output folder}
concurrent=${2:-4}
batches=${3:-3}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
for b in $(seq 1 "$batches"); do
  for i in $(seq 1 "$concurrent"); do
    PYTHONDONTWRITEBYTECODE='' timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider \
      --basetemp "$out/run_${b}_$i" \
      tests/e2e/test_gate_recipe.py::test_identical_trees_are_never_a_regression \
      >"$out/run_${b}_$i.log" 2>&1 &
  done
  wait || true
done
.venv/bin/python tools/verdict/recipe_aa.py "$out"
