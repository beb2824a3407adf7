"""The two phases the startup script runs: the correctness gate, then the timed benchmark.

A run directory holds plan.json, environment.json and results/{correctness,measurements,
summary}.csv, then manifest.json last. SIGTERM/SIGINT stop either phase at the next sample
boundary: what was measured is flushed and the exit code says it was interrupted (143/130);
nothing that claims completeness is written.
"""

from __future__ import annotations

import gc
import json
import math
import secrets
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from benches import bracket as brackets
from benches import correctness, cpu_threads, placement, registry, sequential, timing
from benches.environment import fingerprint
from benches.isolation import (
    CalibrationSamples,
    Measuring,
    WorkerLost,
    calibration_worker,
)
from benches.plan import samples_per_config
from benches.round_order import RoundOrder
from benches.stats import interval_method, overall_speedups, summarize
from benches.telemetry import EMPTY, Telemetry
from benches.writers import (
    RESULTS_SUBDIR,
    CsvWriter,
    StatusWriter,
    read_csv,
    write_csv,
    write_text,
)
from results_schema import (
    CorrectnessRow,
    EnvironmentFingerprint,
    Measurement,
    OverallSpeedup,
    Plan,
    SummaryRow,
)
from results_schema.models import SamplingRecord, implementation_of
from results_schema.sampling import FAMILY_ALPHA


class StopRequested:
    """Turns SIGTERM/SIGINT into a flag read at sample boundaries."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequested:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            print(f"\n{signal.Signals(signum).name}: stopping at the next sample", file=sys.stderr)
        self.signum = signum

    def __call__(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0


@dataclass(frozen=True)
class Selection:
    """The part of a plan a repro runs (`--config`, `--implementation`); None means all.
    Configs keep their place in the plan, so their seeds, and so their inputs, are the
    run's own."""

    configs: frozenset[str] | None = None
    identities: frozenset[str] | None = None

    def config_names(self, plan: Plan) -> set[str]:
        return {c.name for c in plan.configs if self.configs is None or c.name in self.configs}

    def identity_names(self, plan: Plan) -> list[str]:
        return [i for i in plan.identities if self.identities is None or i in self.identities]


@dataclass
class RunContext:
    plan: Plan
    run_dir: Path
    run_id: str
    status: StatusWriter
    stop: StopRequested
    selection: Selection = field(default_factory=Selection)
    device: torch.device = field(init=False)

    def __post_init__(self) -> None:
        self.device = torch.device("cuda" if self.plan.device == "cuda" else "cpu")
        cpu_threads.use(self.device.type)  # the workers' too (benches/worker.py)
        self.results_dir.mkdir(parents=True, exist_ok=True)

    @property
    def results_dir(self) -> Path:
        return self.run_dir / RESULTS_SUBDIR


def require_device(plan: Plan) -> None:
    if plan.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"plan {plan.name!r} needs a CUDA GPU and torch sees none")


# --- correctness -------------------------------------------------------------------------


def expected_pairs(plan: Plan, selection: Selection) -> set[tuple[str, str]]:
    names = selection.identity_names(plan)
    return {(c, i) for c in selection.config_names(plan) for i in names}


def reusable_correctness(ctx: RunContext) -> list[CorrectnessRow] | None:
    """The gate's rows from an earlier `correctness` phase of this run and plan, if any."""
    path = ctx.results_dir / "correctness.csv"
    if not path.is_file():
        return None
    try:
        rows = read_csv(path, CorrectnessRow)
    except ValueError:
        return None
    expected = expected_pairs(ctx.plan, ctx.selection)
    if {(r.config, r.implementation) for r in rows} != expected or len(rows) != len(expected):
        return None
    return rows if all(r.run_id == ctx.run_id for r in rows) else None


def run_correctness(ctx: RunContext) -> list[CorrectnessRow]:
    plan, rows = ctx.plan, []
    started = time.monotonic()
    total = len(plan.configs)
    configs, names = ctx.selection.config_names(plan), ctx.selection.identity_names(plan)
    with CsvWriter(ctx.results_dir / "correctness.csv", CorrectnessRow) as writer:
        for index, config in enumerate(plan.configs):
            if ctx.stop():
                break
            if config.name not in configs:
                continue
            ctx.status.update("correctness", "running", index, total, f"checking {config.name}")
            config_rows = correctness.check_config(
                ctx.run_id, config, plan, index, ctx.device, names
            )
            config_rows = [
                r.model_copy(
                    update={"repro": repro_command("correctness", r.config, [r.implementation])}
                )
                for r in config_rows
            ]
            writer.write(config_rows)
            rows.extend(config_rows)
            _free_device_memory(ctx.device)
    failed = [f"{r.config}/{r.implementation}: {r.message}" for r in rows if not r.passed]
    message = f"{len(rows) - len(failed)}/{len(rows)} passed"
    state = "partial" if ctx.stop() else "complete"
    ctx.status.update(
        "correctness",
        state,
        len(rows) // max(len(names), 1),
        total,
        message,
        force=True,
    )
    print(f"correctness: {message} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    for line in failed:
        print(f"  FAILED {line}", file=sys.stderr)
    return rows


def _free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- benchmark ---------------------------------------------------------------------------


class WorkerTiming:
    """How the parent times the kernels in worker processes (benches/bracket.py): one
    bracket for the run, its calibration (a worker of the harness's own,
    started at the first config that needs it), the gate's tolerance for the rows each
    sample checks, and a secret of this run's for the fresh queries."""

    def __init__(self, ctx: RunContext, clock, gate: list[CorrectnessRow]) -> None:
        self._ctx = ctx
        self.secret = secrets.randbits(62)
        self.bracket = brackets.bracket_for(clock)
        self.calibration = brackets.Calibration(self.bracket, self._calibration_samples)
        # gated -> the calibration's worker and its samples (placements kept per config)
        self._calibrating: dict[bool, tuple] = {}
        self._tolerance = {(r.config, r.implementation): r.tolerance for r in gate}

    def _calibration_samples(
        self, config, mode: str, copies: int, gated: bool, count: int | None = None
    ) -> tuple:
        if gated not in self._calibrating:
            device, flush = self._ctx.device, self._ctx.plan.flush_l2
            worker = calibration_worker(device, flush, gated)
            self._calibrating[gated] = worker, CalibrationSamples(worker, self.bracket, self.secret)
        _, samples = self._calibrating[gated]
        return samples(config, mode, copies, count)

    def measuring(self, config, mode: str, calls: int, batches: dict[str, int] | None = None):
        """identity -> its Measuring, for the placements of `config` in `mode` (a worker on
        the CPU: in batches of `batches[identity]` calls, where it has one)."""

        def of(name: str) -> Measuring:
            own_mode, own_calls = (
                ("batch", batches[name]) if name in (batches or {}) else (mode, calls)
            )
            copies = own_calls if own_mode != "single" else 1

            def overhead(gated: bool) -> float:
                return self.calibration.overhead_ms(config, own_mode, copies, gated)

            def recalibrate(gated: bool) -> None:
                self.calibration.measure_again(config, own_mode, copies, gated)

            def between(gated: bool) -> None:
                self.calibration.between(config, own_mode, copies, gated)

            def own_offset(gated: bool) -> float:
                return self.calibration.own_offset_ms(config, own_mode, copies, gated)

            tolerance = self._tolerance.get((config.name, name))
            return Measuring(
                self.bracket,
                overhead,
                tolerance,
                self.secret,
                own_mode,
                own_calls,
                recalibrate,
                between if self.bracket.interleaves else None,
                own_offset,
            )

        return of

    def close(self) -> None:
        for worker, samples in self._calibrating.values():
            samples.close()
            worker.close()


@dataclass
class ConfigTiming:
    """How one config is timed: who runs, in which mode, how many calls per sample, and
    how the workers among them are measured."""

    runs: dict[str, registry.Implementation]
    inputs: placement.SeededInputs
    mode: str
    calls: int
    measuring: object = None
    lost: dict[str, str] = field(default_factory=dict)  # identity -> why its worker is gone
    batches: dict[str, int] = field(default_factory=dict)  # a CPU worker's calls a sample

    @property
    def chosen(self) -> tuple[str, int, dict[str, int]]:
        return self.mode, self.calls, self.batches


def prepare_config(
    ctx: RunContext,
    clock,
    index: int,
    names: list[str],
    workers: WorkerTiming,
    chosen: tuple[str, int, dict[str, int]] | None = None,
) -> ConfigTiming:
    """Warm every identity up on a throwaway placement and choose the config's mode (a
    later look keeps the first look's `chosen` mode and calls: a config's samples are all
    of one kind). A user's kernel whose worker is lost here is left out of the config
    (`lost`)."""
    plan, config = ctx.plan, ctx.plan.configs[index]
    seed = correctness.config_seed(plan.seed, index, "timing")
    inputs = placement.SeededInputs(config, seed, correctness.make_inputs(config, ctx.device, seed))
    runs = {n: registry.get(implementation_of(n)) for n in names}
    rng = np.random.default_rng(layout_seed(plan, index, workers))
    lost: dict[str, str] = {}
    while True:
        trial: dict = {}
        try:
            measuring = workers.measuring(config, "single", 1)
            trial = placement.build(clock, runs, inputs, "single", 1, rng, measuring)
            settled = {
                n: timing.settled_median_ms(
                    timing.warm_up(p.sample, plan.warmup_min, plan.warmup_max)
                )
                for n, p in trial.items()
            }
            for held in trial.values():  # a wrong answer while warming up refuses it too
                placement.confirm(held)
            batches = _cpu_batches(clock, trial, settled)
            break
        except WorkerLost as exc:
            name = _lost_worker(runs, exc)
            lost[name] = str(exc)
            del runs[name]
            if not runs:
                return ConfigTiming(runs, inputs, "single", 1, None, lost)
        finally:
            placement.release(trial)
    fastest_us = min(settled.values()) * 1e3
    # One mode per config for every implementation: graph and single timings don't compare.
    mode, calls = "single", 1
    if clock.supports_graphs and fastest_us < plan.graph_below_us:
        mode, calls = "graph", timing.graph_calls_for(fastest_us)
    if chosen is not None:
        mode, calls, batches = chosen
    measuring = workers.measuring(config, mode, calls, batches)
    return ConfigTiming(runs, inputs, mode, calls, measuring, lost, batches)


def _cpu_batches(clock, trial: dict, settled: dict) -> dict[str, int]:
    """On the CPU, how many calls a worker's sample holds (timing.batch_calls_for): one
    count for every worker of the config, from the geometric mean of their own times in the
    warm-up (the harness's there is mostly its pipe). Each worker's own count, from its own
    noisy warm-up, gave identical trees 1 and 2 calls on 50 of 216 configs (36 loaded runs,
    2026-11-29), and the one with more calls read 4 % slower a call (base over candidate
    1.040 where the baseline had more, 0.954 where fewer, 1.004 where equal): a verdict the
    code did not earn. The harness's own implementations stay one call a sample: on a loaded
    machine batches of them caught the scheduler's quanta and read bimodal, where single
    calls do not."""
    if clock.supports_graphs:
        return {}
    own = {
        name: max(held.own_fastest_ms() or settled[name], 1e-6)
        for name, held in trial.items()
        if hasattr(held, "own_fastest_ms")
    }
    if not own:
        return {}
    typical_ms = math.exp(statistics.fmean(math.log(ms) for ms in own.values()))
    calls = timing.batch_calls_for(typical_ms * 1e3)
    return dict.fromkeys(own, calls) if calls > 1 else {}


def _lost_worker(runs: dict, exc: WorkerLost) -> str:
    """Which identity's worker `exc` came from."""
    for name, impl in runs.items():
        if getattr(impl, "worker", None) is exc.worker:
            return name
    raise exc


def make_clock(ctx: RunContext):
    if ctx.device.type == "cuda":
        return timing.CudaClock(ctx.device, ctx.plan.flush_l2)
    return timing.CpuClock()


class TimedChecks:
    """Outputs from the timed loop, checked: the first round's against the timing inputs'
    reference; the last round's after fresh inputs were written into every placement's
    buffers just before it (an implementation that skips repeated inputs answers stale).
    Each checked output is poisoned afterwards. Rows go to results/timed_checks.csv."""

    def __init__(self, ctx: RunContext, gate: list[CorrectnessRow], writer: CsvWriter) -> None:
        self._ctx, self._writer = ctx, writer
        self._gate = {(r.config, r.implementation): r for r in gate}
        self.wrong: set[tuple[str, str]] = set()

    def check(self, config, placements: dict, inputs: tuple, stage: str) -> list[str]:
        """Check each placement's latest output (a worker's placement had every call
        checked already: its row says how many, and their worst error); returns the
        identities whose worker was lost on the way (their rows say so)."""
        ref = None
        rows, lost = [], []
        for name, p in placements.items():
            gate_row = self._gate[(config.name, name)]
            if hasattr(p, "checked"):
                rows.append(
                    correctness.checked_row(self._ctx.run_id, config, gate_row, *p.checked(), stage)
                )
                continue
            if ref is None:
                ref = correctness.reference_output(self._ctx.plan, config, inputs)
            try:
                out = p.last_output()
            except WorkerLost as exc:
                out = str(exc)
                lost.append(name)
            row = correctness.check_output(self._ctx.run_id, config, gate_row, out, ref, stage)
            correctness.poison(out)
            rows.append(row)
            if not row.passed:
                self.wrong.add((config.name, name))
                print(f"  WRONG {config.name}/{name}: {row.message}", file=sys.stderr)
        self._writer.write(rows)
        del ref
        return lost

    def lost(self, config, name: str, why: str) -> None:
        """A worker lost while timing: a failed row of stage 'timing', and the config's
        samples of that identity are no result."""
        gate_row = self._gate[(config.name, name)]
        row = correctness.check_output(self._ctx.run_id, config, gate_row, why, None, "timing")
        self.wrong.add((config.name, name))
        print(f"  LOST {config.name}/{name}: {why}", file=sys.stderr)
        self._writer.write([row])


@dataclass
class ConfigLooks:
    """What a config's looks carry from one to the next (benches/sequential.py)."""

    taken: int = 0  # samples (rounds) so far
    blocks: int = 0  # placements so far
    chosen: tuple | None = None  # the first look's mode, calls and CPU batches
    gone: set[str] = field(default_factory=set)  # identities lost on the way


def run_benchmark(
    ctx: RunContext,
    gate: list[CorrectnessRow],
    measurements_per_implementation: int | None,
    environment: EnvironmentFingerprint,
    seconds_left: float | None = None,
) -> tuple[list[Measurement], list[SummaryRow]]:
    """Every config timed, look by look until the run's A/B comparison is decided or its
    bound reached (benches/sequential.py; `seconds_left`: the run's time cap, from now);
    then summarised at the last look's confidence."""
    plan = ctx.plan
    counts = samples_per_config(plan, measurements_per_implementation)
    one_look = measurements_per_implementation is not None or ctx.selection != Selection()
    sampling = sequential.Sampling.of(plan, counts, one_look, seconds_left)
    passed = {(r.config, r.implementation) for r in gate if r.passed}
    chosen = ctx.selection.identity_names(plan)
    timed = [[n for n in chosen if (c.name, n) in passed] for c in plan.configs]
    clock, telemetry = make_clock(ctx), Telemetry() if ctx.device.type == "cuda" else None
    workers = WorkerTiming(ctx, clock, gate)
    measurements: list[Measurement] = []
    looks = [ConfigLooks() for _ in plan.configs]
    peaks = (environment.dense_peaks(), environment.peak_gbytes_per_s)
    started = time.monotonic()
    gc.collect()
    gc.disable()  # a collection inside a timed call would be charged to that sample
    # What exists now (torch, the plan, the gate's rows) lives until the end: frozen, the
    # collection between blocks walks only what the blocks made. Unfrozen, each walked
    # every torch object: 90 ms a block, 12 s of the default plan's 50 (H100, 2026-11-27).
    gc.freeze()
    try:
        with (
            CsvWriter(ctx.results_dir / "measurements.csv", Measurement) as writer,
            CsvWriter(ctx.results_dir / "timed_checks.csv", CorrectnessRow) as check_writer,
        ):
            checks = TimedChecks(ctx, gate, check_writer)
            while True:
                targets = sampling.targets()
                total = sum(n * len(names) for n, names in zip(targets, timed, strict=True))
                for index, config in enumerate(plan.configs):
                    names = [n for n in timed[index] if n not in looks[index].gone]
                    if ctx.stop() or not names:
                        continue
                    state = looks[index]
                    done = len(measurements)
                    _progress(ctx, sampling, done, total, f"warming up {config.name}", force=True)
                    setup = prepare_config(ctx, clock, index, names, workers, state.chosen)
                    state.chosen = setup.chosen
                    blocks = sampling.blocks(plan.placements)
                    rows = time_config(
                        ctx, clock, index, setup, targets[index] - state.taken, checks,
                        telemetry, workers, (sampling.look, state.blocks, state.taken, blocks),
                    )  # fmt: skip
                    for row in rows:
                        writer.write([row])
                        measurements.append(row)
                        done = len(measurements)
                        _progress(ctx, sampling, done, total, f"timing {config.name}")
                    state.taken, state.blocks = targets[index], state.blocks + blocks
                    state.gone |= set(names) - set(setup.runs)
                    del setup
                    _free_device_memory(ctx.device)
                if ctx.stop():
                    sampling.interrupted()
                    break
                if not sampling.after_look(ctx.run_id, measurements, gate, checks.wrong, peaks):
                    break
                print(f"benchmark: {sampling.open_line()}: sampling on", file=sys.stderr)
    finally:
        gc.unfreeze()
        gc.enable()
        workers.close()
        if telemetry:
            telemetry.close()
    print(
        f"benchmark: {len(measurements)}/{total} samples in {time.monotonic() - started:.1f} s"
        + _retaken_words(getattr(clock, "retaken", 0), workers.bracket.retaken)
        + _second_look_words(workers.bracket.looked_again),
        file=sys.stderr,
    )
    record = sampling.record()
    print(f"benchmark: sampling stopped: {record.reason}", file=sys.stderr)
    backends = {(r.config, r.implementation): r.backend for r in gate}
    summary = summarize(
        ctx.run_id, plan, measurements, backends, *peaks, checks.wrong,
        confidence=record.confidence,
    )  # fmt: skip
    summary = [
        r.model_copy(update={"repro": repro_command("run", r.config, [r.implementation, r.versus])})
        for r in summary
    ]
    write_csv(ctx.results_dir / "summary.csv", SummaryRow, summary)
    write_statistics(ctx.run_dir, plan, record.confidence)
    write_comparison(
        ctx.run_dir, overall_speedups(plan, measurements, summary, confidence=record.confidence)
    )
    write_sampling(ctx.run_dir, record)
    state = "partial" if ctx.stop() else "complete"
    ctx.status.update(
        "benchmark",
        state,
        len(measurements),
        total,
        "interrupted" if ctx.stop() else f"done: {record.stopped}",
        force=True,
    )
    return measurements, summary


def _progress(ctx, sampling, done: int, total: int, what: str, force: bool = False) -> None:
    """status.json's line: the samples so far of this look's, the look, what is undecided."""
    words = f"{sampling.message()}: {what}"
    ctx.status.update("benchmark", "running", done, total, words, force=force)


# Far from every config_seed offset (multiples of 104,729 and 7,919 beyond the plan's seed).
LOOK_SEED_STRIDE = (1 << 40) + 15


def _retaken_words(in_parent: int, bracketed: int) -> str:
    """What the log says of samples taken again: in the parent, the host's enqueue outlasted
    the spin before the call; around a worker's call, its reply came too late to be asked
    for before the bracket started (bracket.REPLY_FACTOR: a sync inside the call)."""
    if not in_parent + bracketed:
        return ""
    return (
        f" ({in_parent + bracketed} taken again after a host stall: {in_parent} in the "
        f"parent, {bracketed} around a worker's call)"
    )


def _second_look_words(looks: int) -> str:
    """What the log says of the GPU's own-time rule judging a kernel again on fresh
    brackets before a refusal (isolation.MeasuredPlacement._look_again)."""
    if not looks:
        return ""
    return f" ({looks} own-time check{'s' if looks > 1 else ''} judged again on fresh brackets)"


def layout_seed(plan: Plan, index: int, workers: WorkerTiming) -> int:
    """The seed of a config's placements (where its buffers land) and of its rounds' order:
    the plan's and this run's secret, so that each run draws its own. From the plan's seed
    alone every run of a plan drew the same: one placement of a loaded 2-core CPU read SDPA
    1.6x its A/A twin in 12 runs of 12, another 0.6x, and the twins' config read the same
    bias every run (2026-11-29). The inputs stay the plan's: a row's repro makes them."""
    return correctness.config_seed(plan.seed, index, "order") ^ workers.secret


def look_seed(seed: int, look: int) -> int:
    """A seed of look `look`: the first look's own, each later look's apart from it (its
    placements and fresh inputs are new, not the first look's again)."""
    return seed if look == 0 else (seed + look * LOOK_SEED_STRIDE) % 2**63


def time_config(
    ctx,
    clock,
    index,
    setup: ConfigTiming,
    rounds: int,
    checks: TimedChecks,
    telemetry,
    workers,
    look: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> Iterator[Measurement]:
    """The config's rounds, block by block, each block on fresh placements of every
    identity; the first round's and the last round's outputs are checked. A user's kernel
    whose worker is lost (crash, hang) leaves the config there, its loss a failed timed
    check; the others go on, each round complete without it. `look` is (which look, the
    placements and rounds the config had before it, its placements in it; 0 placements:
    the plan's): a later look's placements and rounds are numbered on from the earlier."""
    plan, config = ctx.plan, ctx.plan.configs[index]
    which, first_block, first_round, placements = look
    order = layout_seed(plan, index, workers)
    rng = np.random.default_rng(look_seed(order, which))
    # The rounds' order carries on across blocks and looks (benches/round_order.py).
    round_order = RoundOrder(order, rounds_before=first_round)
    blocks = placement.rounds_per_placement(rounds, placements or plan.placements)
    for name, why in setup.lost.items():
        checks.lost(config, name, why)
    round_index = first_round
    for block, block_rounds in enumerate(blocks):
        if not setup.runs:
            return
        block_set = _Block(ctx, clock, setup, checks, config, rng, round_order)
        if ctx.device.type == "cuda":
            seconds = timing.SETTLE_SECONDS if block == 0 else 0.0
            block_set.settle(seconds)
        workers.calibration.forget()  # each block's own, taken at its first worker sample
        for r in range(block_rounds):
            last = block == len(blocks) - 1 and r == block_rounds - 1
            if last:
                seed = look_seed(correctness.config_seed(plan.seed, index, "timed-last"), which)
                fresh = correctness.make_inputs(config, ctx.device, seed)
                block_set.refill(fresh, seed)
            for name, ms, held in block_set.round(ctx.stop):
                reading = telemetry.read() if telemetry else EMPTY
                row = _measurement(
                    ctx.run_id,
                    config.name,
                    name,
                    setup,
                    first_block + block,
                    round_index,
                    ms,
                    reading,
                )
                yield row.model_copy(update=_worker_fields(held))
            if ctx.stop():
                block_set.release()
                return
            if round_index == first_round:
                block_set.check(setup.inputs.tensors, "timed-first")
            if last:
                block_set.check(fresh, "timed-last")
            round_index += 1
        block_set.release()


# The name of a worker's calibration bracket in a round's order (_Block.round): a space
# keeps it apart from every identity's name.
CALIBRATION_PLACE = "(calibration)"


class _Block:
    """One block's placements of every identity still timed, and what a lost worker
    costs: its identity leaves the block and the config (`_lose`)."""

    def __init__(
        self, ctx, clock, setup: ConfigTiming, checks: TimedChecks, config, rng, order: RoundOrder
    ):
        self._setup, self._checks, self._config, self._rng = setup, checks, config, rng
        self._order = order
        while True:
            try:
                self.placements = placement.build(
                    clock, setup.runs, setup.inputs, setup.mode, setup.calls, rng, setup.measuring
                )
                return
            except WorkerLost as exc:
                self._lose(_lost_worker(setup.runs, exc), exc)
                if not setup.runs:
                    self.placements = {}
                    return

    def _lose(self, name: str, exc: WorkerLost) -> None:
        """The identity leaves the block and the config; its placement is dropped, as at a
        block's end: a worker refused but alive (a time of its own far from the harness's)
        otherwise kept the placement's lent buffers mapped after the parent freed them, and
        its next placement's open of the same addresses failed (cuIpcOpenMemHandle:
        CUDA_ERROR_ALREADY_MAPPED, an FP8 kernel's next config on an H200, 2026-11-29)."""
        self._checks.lost(self._config, name, str(exc))
        self._setup.runs.pop(name, None)
        held = getattr(self, "placements", {}).pop(name, None)
        if held is not None:
            placement.release({name: held})

    def settle(self, seconds: float) -> None:
        """The block's warm rounds: a worker's placement warms with untimed calls
        (MeasuredPlacement.warm: no bracket, no check), but in the last round with a
        sample as its timed rounds take: with no bracket before them, the first bracketed
        sample of each block read the harness 36 us over the worker's own time (median;
        with this one, 7-9 us, the rest 2-4 us; with two, as before, -1 to 2 us: our kernel
        on an H200, 2026-11-30). The parent's own placements warm with samples throughout."""
        while self.placements:
            held = self.placements.items()
            warm = {n: getattr(p, "warm", p.sample) for n, p in held}
            try:
                timing.settle(warm, seconds, self._rng, min_rounds=placement.WARM_ROUNDS - 1)
                timing.settle({n: p.sample for n, p in held}, 0.0, self._rng)
                return
            except WorkerLost as exc:
                self._lose(_lost_worker(self._setup.runs, exc), exc)

    def round(self, should_stop) -> Iterator[tuple[str, float, object]]:
        """(identity, ms, its placement) for one sample of each identity, in the round order's
        next round (benches/round_order.py: balanced for the sample just before). On the
        CPU a worker's identity has a second place in the order, unrecorded: a bracket of
        the known call, taken where the kernel's samples are (`calibrates_between`)."""
        between = {
            f"{name} {CALIBRATION_PLACE}": name
            for name, held in self.placements.items()
            if getattr(held, "calibrates_between", False)
        }
        for name in self._order.next_round([*self.placements, *between]):
            if should_stop():
                return
            timed = between.get(name, name)
            if timed not in self.placements:
                continue  # its worker was lost earlier in the round
            try:
                if name in between:
                    self.placements[timed].calibrate_between()
                    continue
                ms = self.placements[name].sample()
            except WorkerLost as exc:
                self._lose(timed, exc)
                continue
            yield name, ms, self.placements[name]

    def refill(self, values: tuple, seed: int) -> None:
        """Fresh inputs in every placement of the parent's (a worker's gets fresh queries
        at every call already)."""
        for name, held in list(self.placements.items()):
            if not hasattr(held, "refill"):
                continue
            try:
                held.refill(values, seed)
            except WorkerLost as exc:
                self._lose(name, exc)

    def check(self, inputs: tuple, stage: str) -> None:
        self.confirm()
        for name in self._checks.check(self._config, self.placements, inputs, stage):
            self._setup.runs.pop(name, None)
            del self.placements[name]

    def confirm(self) -> None:
        """Every worker sample's rows checked (a worker's placement checks them in batches:
        MeasuredPlacement.confirm); a kernel whose rows failed leaves the block and the
        config, its samples no result."""
        for name, held in list(self.placements.items()):
            try:
                placement.confirm(held)
            except WorkerLost as exc:
                self._lose(name, exc)

    def release(self) -> None:
        self.confirm()
        placement.release(self.placements)
        gc.collect()  # between blocks, untimed: whatever a cycle held goes now, not at exit


def run_profile(ctx: RunContext, gate: list[CorrectnessRow]) -> None:
    """Nsight Compute after the timing (benches/profile.py): its own time bound; a profile
    that cannot be taken says why in results/profile.csv and the run still completes."""
    from benches.profile import profile_plan

    plan_file = ctx.run_dir / "plan.json"
    passed = {(r.config, r.implementation) for r in gate if r.passed}
    ctx.status.update("benchmark", "running", 0, 0, "profiling with Nsight Compute", force=True)
    profile_plan(ctx.plan, ctx.run_id, plan_file, ctx.results_dir, passed, ctx.stop)


def write_statistics(run_dir: Path, plan: Plan, confidence: float = 1 - FAMILY_ALPHA) -> None:
    """statistics.json: how intervals and verdicts were made, at `confidence` (the last
    look's); the manifest carries it."""
    method = interval_method(plan, confidence)
    write_text(run_dir / "statistics.json", method.model_dump_json(indent=2) + "\n")


def write_sampling(run_dir: Path, record: SamplingRecord) -> None:
    """sampling.json: why the timing stopped sampling; the manifest carries it."""
    write_text(run_dir / "sampling.json", record.model_dump_json(indent=2) + "\n")


def write_comparison(run_dir: Path, overall: list[OverallSpeedup]) -> None:
    """comparison.json: each compared identity across all configs; the manifest carries it."""
    text = json.dumps([o.model_dump(mode="json") for o in overall], indent=2)
    write_text(run_dir / "comparison.json", text + "\n")


def _measurement(
    run_id, config, name, setup: ConfigTiming, block, round_index, ms, reading
) -> Measurement:
    return Measurement(
        run_id=run_id,
        config=config,
        implementation=name,
        mode=setup.mode,
        round=round_index,
        placement=block,
        calls=setup.calls,
        latency_ms=ms,
        sm_clock_mhz=reading.sm_clock_mhz,
        mem_clock_mhz=reading.mem_clock_mhz,
        temperature_c=reading.temperature_c,
        power_w=reading.power_w,
        throttle_reasons=reading.throttle_reasons,
        throttled=reading.throttled,
        timestamp=datetime.now(timezone.utc),
    )


def _worker_fields(held) -> dict:
    """What a worker's placement adds to its sample's row: its own mode and calls (a CPU
    batch), its own report and the harness's bracket time; nothing for the harness's own."""
    if not hasattr(held, "reported"):
        return {}
    return {
        "mode": held.mode,
        "calls": held.calls,
        "reported_ms": held.reported,
        "harness_ms": held.harness,
    }


def repro_command(phase: str, config: str, identities: list[str | None]) -> str:
    """The one line that runs this row again, in the run's payload directory (its root
    holds plan.json: the same seed, so the same inputs): benches' own command line,
    narrowed to the row's config and identities (a summary row's, with what it was
    compared to)."""
    words = ["python", "-m", "benches", phase, "--plan", "plan.json", "--out", "repro"]
    words += ["--config", config]
    for identity in dict.fromkeys(i for i in identities if i):
        words += ["--implementation", identity]
    return shlex.join(words)


# --- side files --------------------------------------------------------------------------


def write_plan(run_dir: Path, plan: Plan) -> None:
    (run_dir / "plan.json").write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")


def load_or_write_environment(run_dir: Path) -> EnvironmentFingerprint:
    """environment.json of this run: the startup script's `environment` phase writes it
    first; a standalone run writes its own."""
    path = run_dir / "environment.json"
    if path.is_file():
        try:
            return EnvironmentFingerprint.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            pass
    environment = fingerprint()
    path.write_text(environment.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return environment
