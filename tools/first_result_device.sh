#!/usr/bin/env bash
# On a GPU host (the device tool's H100): where a first result's seconds go (issue 31 item 4).
#  1. The plain default plan (`bench launch --backend local --plan default --wait --fetch`),
#     once per pass in PASSES ("cold warm" by default: the first builds our kernel, the
#     second restores it from the build cache): the whole command's wall time, the script's
#     phases (manifest), and the startup log (its phase and build lines).
#  2. TIMELINE=1 (default): the last launch's correctness and benchmark phases run again in
#     its sandbox, each in a process of its own as the script runs them, with timers around
#     the parts (worker start and requests, the gate's reference, tolerance, checks and graph
#     probes, warmup, settle, placements, samples, timed checks, CSV and status writes).
#     Then the costs of a fresh interpreter: `import torch`, CUDA's first context, the
#     kernel library's first load and call.
# Needs the payload's python (torch, triton) plus pydantic and platformdirs on PYTHONPATH.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/first-result}
work=$(mktemp -d)
export BENCH_STATE_DIR="$work/state" PYTHONPATH="${PYTHONPATH:-}:$repo"
mkdir -p "$out"

for pass in ${PASSES:-cold warm}; do
  started=$(date +%s.%N)
  (cd "$work" && python3 -m orchestrator launch --backend local --budget 1 --plan default \
      --wait --fetch --dest "$work/results") > "$out/$pass.log" 2>&1
  code=$?
  wall=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
  run=$(grep -o 'launched run [0-9a-f-]*' "$out/$pass.log" | head -1 | cut -d' ' -f3)
  echo "== $pass: launch --wait --fetch exit $code in $wall s (run $run)" | tee -a "$out/summary.txt"
  sandbox=$(dirname "$(dirname "$(find "$work/state" -path "*$run*/logs/startup.log" | head -1)")")
  echo "$sandbox" > "$work/last-sandbox"
  python3 - "$work/results/$run/manifest.json" <<'PHASES' | tee -a "$out/summary.txt"
import json, sys
m = json.load(open(sys.argv[1]))
print("  ", m["status"], ", ".join(f"{p['name']} {p['seconds']:.0f}" for p in m["phases"]))
noise = m.get("noise") or {}
print(f"   A/A control: {noise.get('verdict')} ({noise.get('reason', '')[:120]})")
for b in m.get("user_builds") or []:
    print(f"   build {b['identity']}: {b['outcome']} {b['seconds']} s")
PHASES
  grep -E 'phase |build|cache|environment:|correctness:|benchmark:' "$sandbox/logs/startup.log" \
    | grep -v '^\s*$' | cut -c 1-160 | tee -a "$out/summary.txt"
done

[[ "${TIMELINE:-1}" == 1 ]] || exit 0
sandbox=$(cat "$work/last-sandbox")
cat > "$work/timeline.py" <<'TIMELINE'
"""benches' phase under timers: `timeline.py correctness|run ARGS...` (cli.main's argv).
The worker (spawned: it imports this file as __mp_main__) times its requests too and
prints its totals at each `drop` (it is killed at the end, so no exit hook runs)."""
import collections, functools, sys, time

T0 = time.perf_counter()
totals = collections.defaultdict(lambda: [0, 0.0])
marks = []


def mark(what):
    marks.append((time.perf_counter() - T0, what))


def timed(owner, name, label=None, by=None, table=False):
    original = owner[name] if table else getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        key = label or name
        if by is not None:
            key = f"{key}[{by(args, kwargs)}]"
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            entry = totals[key]
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    if table:
        owner[name] = wrapper
    else:
        setattr(owner, name, wrapper)


def report(title, minimum=0.05):
    print(f"--- timers of {title} (seconds, calls; nested timers overlap)", file=sys.stderr)
    for key, (calls, seconds) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        if seconds >= minimum:
            print(f"  {seconds:7.2f} s {calls:6d}x  {key}", file=sys.stderr)
    sys.stderr.flush()


if __name__ == "__mp_main__":  # the worker
    from benches import worker

    for op in list(worker.REQUESTS):
        timed(worker.REQUESTS, op, f"child {op}", table=True)
    timed(worker, "context_lost", "child context_lost")
    timed(worker, "WorkerState", "child state (entry import, clock)")
    original_drop = worker.REQUESTS["drop"]

    def drop_reporting(state, request):
        reply = original_drop(state, request)
        report(f"the worker at {time.perf_counter() - T0:.1f} s")
        return reply

    worker.REQUESTS["drop"] = drop_reporting


def main():
    # As `benches run` does: the workers start before this process imports torch.
    from benches.cli import resolve_plan
    from benches.worker_start import prestart

    plan = resolve_plan(sys.argv[sys.argv.index("--plan") + 1])
    prestart(plan, plan.identities)
    mark("workers started")
    import torch

    mark("import torch")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    mark("CUDA context")
    from benches import cli, correctness, isolation, placement, runner, timing, writers

    mark("import benches")
    timed(isolation.Worker, "_start", "worker start (spawn, torch, CUDA, entry import)")
    timed(isolation.Worker, "request", "worker request", by=lambda a, k: a[1])
    timed(correctness, "reference_output", "gate: float64 reference")
    timed(correctness, "max_error_tolerance", "gate: tolerance (same-dtype attention)")
    timed(correctness, "_measure", "gate: two calls + errors", by=lambda a, k: a[0])
    timed(correctness, "_graph_probes", "gate: graph probes (all)")
    timed(correctness, "_awkward_lengths", "gate: S=127/129 (all)")
    timed(correctness, "make_inputs", "make_inputs")
    timed(correctness, "errors", "gate: errors()")
    timed(runner, "prepare_config", "bench: prepare_config (warmup, mode)")
    timed(timing, "warm_up", "bench: warm_up")
    timed(timing, "settle", "bench: settle")
    timed(timing, "capture", "bench: graph capture")
    timed(placement, "build", "bench: placement.build")
    timed(placement, "release", "bench: placement.release")
    timed(runner._Block, "__init__", "bench: block placements")
    timed(runner._Block, "settle", "bench: block settle (WARM_ROUNDS, 0.25 s first)")
    timed(runner._Block, "release", "bench: block release + gc")
    timed(runner._Block, "refill", "bench: block refill")
    timed(runner.TimedChecks, "check", "bench: timed checks")
    timed(isolation.RemotePlacement, "sample", "bench: remote sample")
    timed(timing.CudaClock, "time_call", "bench: local time_call")
    timed(writers.CsvWriter, "write", "csv write")
    timed(writers.StatusWriter, "update", "status update")
    timed(runner, "summarize", "bench: summarize")
    timed(runner, "overall_speedups", "bench: overall_speedups")
    timed(runner, "write_csv", "bench: summary csv")
    timed(runner, "_free_device_memory", "empty_cache")
    timed(runner, "load_or_write_environment", "environment load")
    original_prepare = runner.prepare_config

    def prepare_marked(ctx, clock, index, names):
        mark(f"config {index} {ctx.plan.configs[index].name}")
        return original_prepare(ctx, clock, index, names)

    runner.prepare_config = prepare_marked
    original_check = correctness.check_config

    def check_marked(run_id, config, plan, index, device, names=None):
        mark(f"gate {index} {config.name}")
        return original_check(run_id, config, plan, index, device, names)

    correctness.check_config = check_marked
    original_ended = writers.PhaseClock.ended

    def ended_marked(self, phase, *args, **kwargs):
        mark(f"{phase} line written")
        return original_ended(self, phase, *args, **kwargs)

    writers.PhaseClock.ended = ended_marked
    code = cli.main(sys.argv[1:])
    mark(f"{sys.argv[1]} done (exit {code})")
    total = time.perf_counter() - T0
    print(f"--- timeline of `{sys.argv[1]}` ({total:.2f} s in this process)", file=sys.stderr)
    previous = 0.0
    for at, what in marks:
        print(f"  {at:7.2f} (+{at - previous:5.2f})  {what}", file=sys.stderr)
        previous = at
    report("the parent")


if __name__ == "__main__":
    main()
TIMELINE
cat > "$work/fresh.py" <<'FRESH'
"""A fresh interpreter's fixed costs, as a worker pays them."""
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t2 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from kernels.flash_attention.api import flash_attention
t3 = time.perf_counter()
q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.float16)
flash_attention(q, q, q, causal=False, scale=0.125); torch.cuda.synchronize()
t4 = time.perf_counter()
q = torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16)
flash_attention(q, q, q, causal=False, scale=0.125); torch.cuda.synchronize()
t5 = time.perf_counter()
import benches.worker
t6 = time.perf_counter()
print(f"fresh interpreter: import torch {t1-t0:.2f} s, CUDA context {t2-t1:.2f} s, "
      f"import api {t3-t2:.2f} s, first call fp16 d64 {t4-t3:.2f} s, "
      f"first call bf16 d128 {t5-t4:.2f} s, import benches.worker {t6-t5:.2f} s")
FRESH
tree=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['user_kernels'][0]['directory'])" "$sandbox/plan.json")
rerun=$work/rerun
# The measure phase's one process (the gate, then the timing), from the shared harness
# folder the script runs it from (cuDNN's compiled kernels are cached per folder).
harness=$(dirname "$sandbox")/.harness
for phase in run; do
  mkdir -p "$rerun" "$harness"
  (cd "$harness" && PYTHONPATH="$sandbox/payload:$PYTHONPATH" \
    python3 "$work/timeline.py" "$phase" --plan "$sandbox/plan.json" --out "$rerun" \
    --status-file "$rerun/status.json" --phases-file "$rerun/phases.tsv" \
    --phase-started "$(date +%s)") > "$out/timeline-$phase.log" 2>&1
  grep -E '^(correctness|benchmark):' "$out/timeline-$phase.log"
  sed -n '/^--- timeline/,$p' "$out/timeline-$phase.log"
  echo "--- the worker's last totals"
  tac "$out/timeline-$phase.log" | sed -n '1,/^--- timers of the worker/p' | tac | head -30
done
(cd "$sandbox/payload" && FLASH_KERNEL_CACHE="$sandbox/payload/$tree/.kernel-cache" \
  PYTHONPATH="$sandbox/payload:$PYTHONPATH" python3 "$work/fresh.py" "$sandbox/payload/$tree")
# The environment and build phases' own commands, warm (the launches above ran them once).
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); python3 -c "print(round($t1 - $t0, 2))"; }
(cd "$sandbox/payload" && echo "benches environment: $(seconds python3 -m benches environment --out /tmp/env.json) s")
echo "python -c 'import torch': $(seconds python3 -c 'import torch') s"
echo "nvidia-smi compute_cap: $(seconds nvidia-smi --query-gpu=compute_cap --format=csv,noheader) s"
echo "nvcc --version: $(seconds "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version) s"
(cd "$sandbox/payload/$tree" && echo "build.py --check (library cached): $(seconds env FLASH_KERNEL_CACHE="$sandbox/payload/$tree/.kernel-cache" python3 -m kernels.flash_attention.build --check) s")
