# shellcheck shell=bash
# Sourced by the gate's device scripts (decisions_device.sh, operating_point_device.sh) from
# the repository root: the carried wheels put where the tools import them, and the trees a
# gate run's candidate and baseline come from.

# gate_setup NAME: pydantic & co. installed from the carried .whl/ (the device image lacks
# them, and has no index) where the tools import them, and the script's globals set: repo
# (here), out ($OUT, else /tmp/NAME), work (a fresh folder), tool (operating_point.py).
gate_setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
  export PYTHONUNBUFFERED=1
  export PYTHONPATH="/tmp/site:$PWD"
  # shellcheck disable=SC2034 # the sourcing script's
  {
    repo=$PWD
    out=${OUT:-/tmp/$1}
    work=$(mktemp -d "/tmp/$1.XXXXXX")
    tool="$repo/tools/gate/operating_point.py"
  }
  mkdir -p "$out"
}

# make_trees REPO WORK: WORK/base, a copy of REPO's kernels/ (the baseline), and WORK/slowed,
# a copy of REPO whose flash_attention is slowed as PLANT, PLANT_PCT and DELAY_NS say
# (plant_slowdown.py).
make_trees() {
  local repo=$1 work=$2
  mkdir -p "$work/base" "$work/slowed"
  cp -r "$repo/kernels" "$work/base/"
  tar -C "$repo" --exclude=./.git --exclude=./.whl --exclude=./.venv --exclude=./shared \
    --exclude=./results --exclude=__pycache__ --exclude=.kernel-cache -cf - . \
    | tar -C "$work/slowed" -xf -
  python3 "$repo/tools/gate/plant_slowdown.py" "$work/slowed/kernels"
}
