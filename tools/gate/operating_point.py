"""The CI gate's operating point from a few long runs (issue 49, item 5; developer tool).

A gated run on the H200 costs about a minute, so a hundred gate decisions cannot be a
hundred runs. Instead a few LONG runs each time our kernel's base tree against a copy of it
(identical, or slowed by a planted amount) for many placements of every config, in one look
(tools/gate/operating_point_device.sh makes them). Each run's samples are cut, per config,
into disjoint consecutive chunks of whole placements in time order, and on each chunk the
gate's decision is replayed exactly as a real run makes it: the gate plan's looks
(plan.look_schedule(), each at look_confidence), sampling stopped by benches.sequential's own
Sampling.after_look, the run's summary, geometric means and noise decision made by
benches.stats.summarize / overall_speedups and benches.noise.control_noise at the confidence
of the look it stopped at, and the exit code by the controller's gate itself
(orchestrator.service.gate.judge) at the plan's margin. A chunk's placements and rounds are
numbered from 0, as a run of the gate plan numbers its own.

Decisions: exit 0 (pass) / 6 (regression) / 7 (inconclusive) / 8 (candidate incorrect).
On identical trees a 6 is a false alarm; on a slowed tree a 6 is the power.

Chunks: `--consume looks` (default) gives each decision the placements its looks used and
starts the next at the placement after them, as back-to-back pull requests would take
them; `--consume bound` gives each decision the whole schedule's placements (fixed
chunks), whatever look it stopped at. Either way no chunk mixes placements, configs are
cut alike, and no chunk crosses runs.

Independence (whether chunk decisions count as separate gate runs): each chunk's estimate
of the log speedup it judged (the geometric mean over configs of the median paired ratio,
candidate against baseline, on the placements the decision used), per run in time order:
its lag-1 autocorrelation, against the ±2/sqrt(n) band and a permutation p-value; and
across the runs of one kind, a one-way random-effects ANOVA (between-run against within-run
mean squares, F, a permutation p-value, the between-run variance component and the
intra-class correlation). When the between-run component is material, chunks of one run
share an offset a fresh run would not: the rates are then also given per run, and with the
design effect 1 + (m - 1) ICC (Kish) shrinking the number of decisions to an effective one.

Cost: the samples per config each decision stopped at, priced on a spot L4 by the repo's
runtime model (orchestrator/runtime_model.py: model_phases for gce/nvidia-l4) at the
bundled price catalog (orchestrator/backends/gce/pricing.py), billed per second with GCE's
one-minute minimum (results_schema.record.billed_usd).

    python3 tools/gate/operating_point.py analyze --identical RUN_DIR... --slowed RUN_DIR...
        [--gate 20/4/80 ...] [--consume looks|bound] [--jobs N] [--json OUT]
    python3 tools/gate/operating_point.py analyze --series LAUNCHES.tsv...   # gate runs

Gate runs (decisions_device.sh) are runs of the gate plan itself, one decision each: the
replay is held to the launch's own exit, and a series is a lane of them in launch order.
    python3 tools/gate/operating_point.py plan --rounds N --per-placement R --configs A,B OUT
    python3 tools/gate/operating_point.py pace RUN_DIR   # seconds per round of one config
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benches.noise import control_noise  # noqa: E402 (the repository on sys.path first)
from benches.placement import rounds_per_placement  # noqa: E402
from benches.sequential import Sampling  # noqa: E402
from benches.stats import interval_method, overall_speedups, summarize  # noqa: E402
from results_schema import CorrectnessRow, Manifest, Measurement, Plan  # noqa: E402
from results_schema.models import Sampling as PlanSampling  # noqa: E402

KINDS = ("identical", "slowed")
EXIT_WORDS = {0: "pass", 6: "regression", 7: "inconclusive", 8: "incorrect"}
DEFAULT_GATES = ("20/4/80",)
RUNS_LISTED = 12  # more runs than this are shown per series
PERMUTATIONS = 2000


# --- the gate plan and its looks -------------------------------------------------------


@dataclass(frozen=True)
class GateSpec:
    """A gate plan's sampling: samples per config at the first look, its placements, the
    bound (the last look's samples)."""

    first: int
    placements: int
    most: int

    @classmethod
    def parse(cls, text: str) -> GateSpec:
        first, placements, most = (int(x) for x in text.split("/"))
        return cls(first, placements, most)

    @property
    def label(self) -> str:
        return f"{self.first}/{self.placements}/{self.most}"


def gate_plan(long_plan: Plan, spec: GateSpec) -> Plan:
    """The plan a pull request's gated run would have: the long run's plan (configs,
    identities, trees, control, margin, seed) with the gate's samples, placements and bound."""
    plan = gated(long_plan, spec)
    if plan.comparison is None:
        raise SystemExit("the long run has no A/B comparison: nothing to gate")
    return plan


def gated(long_plan: Plan, spec: GateSpec) -> Plan:
    """`long_plan` with the gate's samples, placements and bound (`plan --gate`: the plan
    gate runs launch with, their comparison added by `--baseline`)."""
    sampling = (long_plan.sampling or PlanSampling()).model_copy(
        update={"max_samples_per_config": spec.most, "max_seconds": None}
    )
    plan = long_plan.model_copy(
        update={
            "samples_per_config": spec.first,
            "placements": spec.placements,
            "sampling": sampling,
            "profile": None,
        }
    )
    return Plan.model_validate(plan.model_dump())


def look_blocks(plan: Plan) -> list[list[int]]:
    """Rounds of each placement each look of `plan` adds, as the runner lays them out
    (benches.sequential.Sampling.blocks, benches.placement.rounds_per_placement)."""
    sampling = Sampling.of(plan, [plan.samples_per_config] * len(plan.configs), False, None)
    layout, before = [], 0
    for look, samples in enumerate(sampling.schedule):
        sampling.look = look
        blocks = sampling.blocks(plan.placements)
        layout.append(rounds_per_placement(samples - before, blocks))
        before = samples
    return layout


def rounds_per_block(plan: Plan) -> int:
    """The one round count every placement of the gate plan has; SystemExit otherwise (a
    long run's placements, all alike, could not stand for them)."""
    counts = {r for look in look_blocks(plan) for r in look}
    if len(counts) != 1:
        raise SystemExit(
            f"gate {plan.samples_per_config}/{plan.placements}/{plan.look_schedule()[-1]}: its "
            f"placements take {sorted(counts)} rounds; choose one where every look's do alike"
        )
    return counts.pop()


# --- a long run ----------------------------------------------------------------------------


@dataclass
class LongRun:
    run_id: str
    kind: str  # identical | slowed
    plan: Plan
    measurements: list[Measurement]
    checks: list[CorrectnessRow]
    manifest: Manifest
    peaks: tuple[float | None, float | None] = (None, None)
    # A run of the gate plan itself (decisions_device.sh): the series it belongs to (a lane:
    # one GPU of one device call, its launches in time order) and the exit its own launch
    # gave. A long run is its own series.
    series: str | None = None
    launch_exit: int | None = None

    @property
    def gate_rows(self) -> list[CorrectnessRow]:
        """The correctness gate's rows (the runner's `gate`), without the timed loop's."""
        return [c for c in self.checks if c.stage in ("gate", "graph-probe")]

    @property
    def wrong(self) -> set[tuple[str, str]]:
        """(config, identity) whose timed loop's outputs failed a check: the runner's."""
        timed = ("timed-first", "timed-last", "timing")
        return {
            (c.config, c.implementation) for c in self.checks if c.stage in timed and not c.passed
        }


def load_long_run(
    run_dir: Path, kind: str, series: str | None = None, launch_exit: int | None = None
) -> LongRun:
    """A fetched run folder (DEST/<run id>/) through the controller's own reader."""
    from orchestrator import boundary
    from orchestrator.report.load import load_run

    run = load_run(run_dir)
    if run.plan is None or run.manifest is None:
        raise SystemExit(f"{run_dir}: no plan or manifest")
    path = run_dir / "results" / "measurements.csv"
    rows = list(boundary.checked_rows(path, "measurements.csv", run.run_id, plan=run.plan))
    env = run.manifest.environment
    peaks = (env.dense_peaks(), env.peak_gbytes_per_s) if env else (None, None)
    checks = list(run.checks)
    return LongRun(
        run.run_id, kind, run.plan, rows, checks, run.manifest, peaks, series, launch_exit
    )


# --- chunks --------------------------------------------------------------------------------


@dataclass
class Placements:
    """One run's samples as whole placements: per config, in time order (placement ids
    grow with time within a config), each placement's rows."""

    by_config: dict[str, list[list[Measurement]]]
    rounds: dict[str, list[int]]  # each placement's rounds, per config

    @classmethod
    def of(cls, plan: Plan, measurements: Sequence[Measurement]) -> Placements:
        grouped: dict[str, dict[int, list[Measurement]]] = defaultdict(lambda: defaultdict(list))
        for m in measurements:
            grouped[m.config][m.placement].append(m)
        by_config, rounds = {}, {}
        for config in plan.configs:
            blocks = grouped.get(config.name, {})
            ordered = [blocks[p] for p in sorted(blocks)]
            by_config[config.name] = ordered
            rounds[config.name] = [len({m.round for m in block}) for block in ordered]
        return cls(by_config, rounds)

    def usable(self, per_block: int) -> int:
        """Placements usable in order, the same count for every config: up to the first
        that lacks a round, or a sample of a round (a run cut short, an identity lost)."""
        counts = []
        for config, blocks in self.by_config.items():
            identities = {m.implementation for m in blocks[0]} if blocks else set()
            n = 0
            for block, rounds in zip(blocks, self.rounds[config], strict=True):
                whole = rounds == per_block and len(block) == per_block * len(identities)
                if not whole or {m.implementation for m in block} != identities:
                    break  # a round short, or one without every identity
                n += 1
            counts.append(n)
        return min(counts) if counts else 0

    def chunk(self, start: int, count: int) -> list[Measurement]:
        """Placements [start, start + count) of every config, renumbered from 0 (placements
        and rounds, order kept), as a run of the gate plan numbers its own."""
        rows = []
        for blocks in self.by_config.values():
            taken = blocks[start : start + count]
            rounds = sorted({m.round for block in taken for m in block})
            renumber = {r: i for i, r in enumerate(rounds)}
            for index, block in enumerate(taken):
                for m in block:
                    update = {"placement": index, "round": renumber[m.round]}
                    rows.append(m.model_copy(update=update))
        return rows


# --- one decision --------------------------------------------------------------------------


@dataclass
class Decision:
    run_id: str
    kind: str
    index: int  # the decision's place in its run
    first_placement: int  # of the long run, per config
    placements: int  # the placements it used
    exit_code: int
    outcome: str
    stopped: str
    looks: int
    samples_per_config: int
    geomean: float | None
    low: float | None
    high: float | None
    control: float | None
    log_estimate: float | None  # log speedup over the placements used (independence)
    series: str = ""  # the run's, or its lane's (LongRun.series)
    launch_exit: int | None = None  # a gate run's own launch's exit, to hold the replay to


def replay(
    plan: Plan,
    chunk: list[Measurement],
    run: LongRun,
    layout: list[list[int]],
) -> tuple[int, dict]:
    """The gate's decision on one chunk (placements renumbered from 0): looks taken by
    benches.sequential.Sampling, the summary at the stopping look's confidence, the exit by
    orchestrator.service.gate.judge. Returns (placements used, what it decided)."""
    from orchestrator.report.load import RunResults
    from orchestrator.service.gate import GateOptions, judge

    counts = [plan.samples_per_config] * len(plan.configs)
    sampling = Sampling.of(plan, counts, False, None)
    cumulative = np.cumsum([len(look) for look in layout]).tolist()
    gate_rows, wrong = run.gate_rows, run.wrong
    while True:
        upto = cumulative[sampling.look]
        seen = [m for m in chunk if m.placement < upto]
        if not sampling.after_look(run.run_id, seen, gate_rows, wrong, run.peaks):
            break
    record = sampling.record()
    confidence = record.confidence
    backends = {(c.config, c.implementation): c.backend for c in gate_rows}
    summary = summarize(
        run.run_id, plan, seen, backends, *run.peaks, wrong, confidence=confidence
    )  # fmt: skip
    overall = overall_speedups(plan, seen, summary, confidence=confidence)
    noise = control_noise(plan, seen, summary, alpha=1 - confidence)
    statistics = interval_method(plan, confidence)
    manifest = run.manifest.model_copy(
        update={
            "status": "complete",
            "plan": plan,
            "comparison": overall,
            "noise": noise,
            "sampling": record,
            "statistics": statistics,
        }
    )
    results = RunResults(
        run.run_id, "complete", plan, summary, {}, statistics, manifest, checks=run.checks
    ).judged_at(plan.margin)
    report = judge(results, results.checks, GateOptions(gate_on=plan.decide_on))
    line = report.overall
    decided = {
        "exit_code": report.exit_code,
        "outcome": report.outcome,
        "stopped": record.stopped,
        "looks": record.looks,
        "samples_per_config": record.samples_per_config,
        "geomean": line.speedup if line else None,
        "low": line.ci_low if line else None,
        "high": line.ci_high if line else None,
        "control": report.control.speedup if report.control else None,
        "log_estimate": log_speedup(plan, seen, plan.comparison.baseline, plan.candidate),
    }
    return upto, decided


def log_speedup(plan: Plan, rows: Sequence[Measurement], baseline: str, candidate: str):
    """The mean over configs of the log median paired ratio baseline/candidate (the gate's
    point estimate, on the log scale); None without pairs."""
    pairs: dict[tuple[str, str], dict[tuple[int, int], float]] = defaultdict(dict)
    for m in rows:
        if m.implementation in (baseline, candidate):
            pairs[(m.config, m.implementation)][(m.placement, m.round)] = m.latency_ms
    logs = []
    for config in plan.configs:
        b, c = pairs.get((config.name, baseline), {}), pairs.get((config.name, candidate), {})
        keys = sorted(set(b) & set(c))
        if keys:
            logs.append(math.log(float(np.median([b[k] / c[k] for k in keys]))))
    return float(np.mean(logs)) if logs else None


def decide_run(run: LongRun, spec: GateSpec, consume: str) -> list[Decision]:
    """Every decision one long run gives for the gate `spec`, in time order."""
    plan = gate_plan(run.plan, spec)
    layout = look_blocks(plan)
    per_block = rounds_per_block(plan)
    placements = Placements.of(run.plan, run.measurements)
    usable = placements.usable(per_block)
    whole = sum(len(look) for look in layout)
    mine = {"series": run.series or run.run_id, "launch_exit": run.launch_exit}
    if is_gate_run(run.plan, plan):
        # Its own sampling stopped where it decided: one decision, on what it took.
        used, decided = replay(plan, placements.chunk(0, usable), run, layout)
        return [Decision(run.run_id, run.kind, 0, 0, used, **decided, **mine)]
    decisions, start = [], 0
    while start + whole <= usable:
        chunk = placements.chunk(start, whole)
        used, decided = replay(plan, chunk, run, layout)
        decisions.append(
            Decision(run.run_id, run.kind, len(decisions), start, used, **decided, **mine)
        )
        start += used if consume == "looks" else whole
    return decisions


def is_gate_run(run_plan: Plan, gate: Plan) -> bool:
    """Whether a run was made with the gate plan itself (its looks and placements), not a
    long run to cut into chunks."""
    return (
        run_plan.look_schedule() == gate.look_schedule() and run_plan.placements == gate.placements
    )


def _decide_task(args):
    run, spec, consume = args
    return decide_run(run, spec, consume)


def decide_all(runs: list[LongRun], spec: GateSpec, consume: str, jobs: int) -> list[Decision]:
    tasks = [(run, spec, consume) for run in runs]
    if jobs > 1 and len(tasks) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            found = list(pool.map(_decide_task, tasks))
    else:
        found = [_decide_task(t) for t in tasks]
    return [d for run_decisions in found for d in run_decisions]


# --- rates and their intervals -------------------------------------------------------------


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        + i * math.log(p) + (n - i) * math.log1p(-p)
        for i in range(0, k + 1)
    ]  # fmt: skip
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial proportion, by bisection."""
    if n == 0:
        return 0.0, 1.0
    tail = (1 - confidence) / 2

    def solve(target: float, k_at: int) -> float:
        """The p at which P(X <= k_at) = target (the CDF falls as p rises)."""
        lo, hi = 0.0, 1.0
        for _ in range(80):
            mid = (lo + hi) / 2
            if _binomial_cdf(k_at, n, mid) > target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(1 - tail, k - 1)  # P(X >= k) = tail
    high = 1.0 if k == n else solve(tail, k)  # P(X <= k) = tail
    return low, high


def wilson(k: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval (n may be an effective, non-integer count)."""
    if n <= 0:
        return 0.0, 1.0
    from statistics import NormalDist

    z = NormalDist().inv_cdf((1 + confidence) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    what: str
    count: int
    decisions: int
    clopper_pearson: tuple[float, float]
    wilson: tuple[float, float]

    @property
    def rate(self) -> float:
        return self.count / self.decisions if self.decisions else float("nan")


def rate(what: str, count: int, decisions: int) -> Rate:
    return Rate(what, count, decisions, clopper_pearson(count, decisions), wilson(count, decisions))


# --- independence --------------------------------------------------------------------------


def lag1(values: Sequence[float]) -> float | None:
    """The lag-1 autocorrelation of a series (None for fewer than 3 values or no spread)."""
    x = np.asarray(values, dtype=float)
    if x.size < 3:
        return None
    d = x - x.mean()
    denominator = float(np.sum(d * d))
    if denominator == 0:
        return None
    return float(np.sum(d[:-1] * d[1:]) / denominator)


def lag1_permutation_p(values: Sequence[float], seed: int = 0) -> float | None:
    """Two-sided: the share of random orders whose |lag-1| reaches the observed one."""
    observed = lag1(values)
    if observed is None:
        return None
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=float)
    hits = sum(abs(lag1(rng.permutation(x)) or 0.0) >= abs(observed) for _ in range(PERMUTATIONS))
    return (hits + 1) / (PERMUTATIONS + 1)


@dataclass
class Anova:
    """One-way random-effects ANOVA of chunk estimates grouped by run."""

    runs: int
    n: int
    ms_between: float
    ms_within: float
    f: float
    p_permutation: float
    var_between: float  # the between-run variance component, at least 0
    var_within: float
    icc: float
    mean_group_size: float

    @property
    def design_effect(self) -> float:
        return 1 + (self.mean_group_size - 1) * self.icc


def _f_statistic(groups: list[np.ndarray]) -> tuple[float, float, float]:
    n = sum(g.size for g in groups)
    k = len(groups)
    grand = np.concatenate(groups).mean()
    ssb = sum(g.size * (g.mean() - grand) ** 2 for g in groups)
    ssw = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
    msb = ssb / (k - 1)
    msw = ssw / (n - k) if n > k else float("nan")
    return msb, msw, (msb / msw if msw > 0 else float("inf"))


def anova(groups: Sequence[Sequence[float]], seed: int = 0) -> Anova | None:
    """Between-run against within-run variance; None for fewer than two runs of two or more
    estimates. The p-value permutes the estimates across runs (no normality assumed)."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    if len(arrays) < 2:
        return None
    n, k = sum(a.size for a in arrays), len(arrays)
    msb, msw, f = _f_statistic(arrays)
    pooled, sizes = np.concatenate(arrays), [a.size for a in arrays]
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(PERMUTATIONS):
        shuffled = rng.permutation(pooled)
        parts = np.split(shuffled, np.cumsum(sizes)[:-1])
        hits += _f_statistic(parts)[2] >= f
    n0 = (n - sum(s * s for s in sizes) / n) / (k - 1)
    var_between = max(0.0, (msb - msw) / n0)
    total = var_between + msw
    icc = var_between / total if total > 0 else 0.0
    return Anova(
        runs=k,
        n=n,
        ms_between=float(msb),
        ms_within=float(msw),
        f=float(f),
        p_permutation=(hits + 1) / (PERMUTATIONS + 1),
        var_between=float(var_between),
        var_within=float(msw),
        icc=float(icc),
        mean_group_size=n / k,
    )


@dataclass
class Independence:
    per_run: list[dict] = field(default_factory=list)  # run, kind, n, lag1, band, p
    anova: dict[str, Anova | None] = field(default_factory=dict)
    independent: bool = True
    material_between: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def independence(decisions: list[Decision], alpha: float = 0.05) -> Independence:
    """Lag-1 autocorrelation within each run, ANOVA across the runs of each kind, and the
    plain reading of both: independent when no run's lag-1 is significant (permutation,
    Bonferroni over runs) and no kind's between-run variance is (permutation F)."""
    found = Independence()
    series: dict[tuple[str, str], list[float]] = defaultdict(list)
    # In time order within a series: a long run's chunks, or a lane's runs (run ids start
    # with the launch's time, and a lane launches one run at a time).
    for d in sorted(decisions, key=lambda d: (d.series or d.run_id, d.run_id, d.index)):
        if d.log_estimate is not None:
            series[(d.kind, d.series or d.run_id)].append(d.log_estimate)
    tests = max(len(series), 1)
    for (kind, run_id), values in series.items():
        r1, p = lag1(values), lag1_permutation_p(values)
        band = 2 / math.sqrt(len(values)) if values else float("nan")
        significant = p is not None and p < alpha / tests
        found.per_run.append(
            {"run": run_id, "kind": kind, "n": len(values), "lag1": r1, "band": band, "p": p,
             "significant": significant}
        )  # fmt: skip
        if significant:
            found.independent = False
            found.notes.append(
                f"series {run_id} ({kind}): lag-1 {r1:.3f}, p {p:.3g} < {alpha / tests:.3g}: "
                "consecutive decisions are correlated"
            )
    for kind in KINDS:
        groups = [v for (k, _), v in series.items() if k == kind]
        result = anova(groups)
        found.anova[kind] = result
        material = result is not None and result.p_permutation < alpha
        found.material_between[kind] = material
        if material:
            found.independent = False
            found.notes.append(
                f"{kind}: between-series variance is material (F {result.f:.2f}, permutation p "
                f"{result.p_permutation:.3g}, ICC {result.icc:.3f}, design effect "
                f"{result.design_effect:.2f}): decisions of one series share an offset a new "
                "series would not"
            )
        elif result is None and groups:
            found.notes.append(
                f"{kind}: fewer than two series with two or more decisions: between-series "
                "variance not measured"
            )
    return found


# --- cost on an L4 -------------------------------------------------------------------------


def l4_cost(plan: Plan, samples: int, warm: bool) -> tuple[float, int]:
    """(USD, seconds) of one run of `plan` taking `samples` a config on a spot L4, by the
    runtime model (its benchmark phase counts the last look's samples: a plan whose one
    look is `samples`) and the bundled price catalog, billed as GCE bills."""
    from orchestrator.backends.gce import pricing
    from orchestrator.config import DEFAULT_IMAGE_FAMILY, BenchConfig
    from orchestrator.runtime_model import model_phases
    from results_schema.record import billed_usd

    sampling = (plan.sampling or PlanSampling()).model_copy(
        update={"max_samples_per_config": samples}
    )
    sized = plan.model_copy(update={"samples_per_config": samples, "sampling": sampling})
    config = BenchConfig()
    estimate = model_phases(sized, "gce", config.accelerator_type, DEFAULT_IMAGE_FAMILY, warm)
    rate_ = pricing.hourly_rate(config, spot=True, catalog=pricing.load_catalog())
    seconds = estimate.total_seconds
    return billed_usd(rate_.total, seconds), seconds


def cost_summary(plan: Plan, decisions: list[Decision]) -> dict:
    """Mean cost per decision on an L4 (each at the samples it stopped at), first run of a
    machine (caches cold) and later (caches warm), and at the plan's bound."""
    out: dict = {}
    if not decisions:
        return out
    counts = Counter(d.samples_per_config for d in decisions)
    for warm in (False, True):
        priced = {s: l4_cost(plan, s, warm) for s in counts}
        total = sum(priced[s][0] * n for s, n in counts.items())
        key = "warm" if warm else "cold"
        out[f"usd_mean_{key}"] = total / len(decisions)
        out[f"seconds_mean_{key}"] = sum(priced[s][1] * n for s, n in counts.items()) / len(
            decisions
        )
        out[f"usd_bound_{key}"] = l4_cost(plan, plan.look_schedule()[-1], warm)[0]
    out["samples_per_config_mean"] = sum(s * n for s, n in counts.items()) / len(decisions)
    out["samples_per_config"] = dict(sorted(counts.items()))
    return out


# --- the report ----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _interval(r: Rate) -> str:
    cp, w = r.clopper_pearson, r.wilson
    return (
        f"{r.count}/{r.decisions} = {_pct(r.rate)}  CP95 [{_pct(cp[0])}, {_pct(cp[1])}]  "
        f"Wilson95 [{_pct(w[0])}, {_pct(w[1])}]"
    )


def measured_slowdown(runs: list[LongRun]) -> dict[str, float | None]:
    """Each run's whole-run estimate of the candidate's speedup over its baseline (the
    planted amount as the run measured it, for slowed runs; about 1 for identical ones)."""
    found = {}
    for run in runs:
        plan = run.plan
        value = log_speedup(plan, run.measurements, plan.comparison.baseline, plan.candidate)
        found[run.run_id] = math.exp(value) if value is not None else None
    return found


def analyze(runs: list[LongRun], spec: GateSpec, consume: str = "looks", jobs: int = 1) -> dict:
    decisions = decide_all(runs, spec, consume, jobs)
    by_kind = {k: [d for d in decisions if d.kind == k] for k in KINDS}
    identical, slowed = by_kind["identical"], by_kind["slowed"]
    rates = {
        "false_alarm": rate(
            "false alarm (exit 6, identical)", _count(identical, 6), len(identical)
        ),
        "inconclusive_identical": rate(
            "inconclusive (exit 7, identical)", _count(identical, 7), len(identical)
        ),
        "pass_identical": rate("pass (exit 0, identical)", _count(identical, 0), len(identical)),
        "power": rate("power (exit 6, slowed)", _count(slowed, 6), len(slowed)),
        "inconclusive_slowed": rate(
            "inconclusive (exit 7, slowed)", _count(slowed, 7), len(slowed)
        ),
        "pass_slowed": rate("pass (exit 0, slowed: a miss)", _count(slowed, 0), len(slowed)),
    }
    indep = independence(decisions)
    per_run = []
    for run in runs:
        mine = [d for d in decisions if d.run_id == run.run_id]
        per_run.append(
            {
                "run": run.run_id,
                "kind": run.kind,
                "decisions": len(mine),
                "exits": dict(sorted(Counter(d.exit_code for d in mine).items())),
            }
        )
    effective = {}
    for kind, exit_code, name in (("identical", 6, "false_alarm"), ("slowed", 6, "power")):
        result = indep.anova.get(kind)
        mine = by_kind[kind]
        if result is not None and mine:
            n_eff = len(mine) / max(result.design_effect, 1.0)
            k = _count(mine, exit_code) / len(mine) * n_eff
            effective[name] = {"n_effective": n_eff, "wilson": wilson(k, n_eff)}
    run_level = {}
    for kind, exit_code, name in (("identical", 6, "false_alarm"), ("identical", 7,
                                  "inconclusive_identical"), ("slowed", 6, "power")):  # fmt: skip
        shares = [
            _count(ds, exit_code) / len(ds)
            for ds in (
                [d for d in by_kind[kind] if d.run_id == r.run_id] for r in runs if r.kind == kind
            )
            if ds
        ]
        if shares:
            run_level[name] = {"runs": len(shares), "mean": float(np.mean(shares)),
                               "per_run": shares}  # fmt: skip
    by_series = defaultdict(Counter)
    for d in decisions:
        by_series[(d.series, d.kind)][d.exit_code] += 1
    launched = [d for d in decisions if d.launch_exit is not None]
    replay_agrees = {
        "decisions": len(launched),
        "agree": sum(d.exit_code == d.launch_exit for d in launched),
        "differ": [
            {"run": d.run_id, "replay": d.exit_code, "launch": d.launch_exit}
            for d in launched
            if d.exit_code != d.launch_exit
        ],
    }
    cost = cost_summary(gate_plan(runs[0].plan, spec), identical or decisions) if runs else {}
    cost_slowed = cost_summary(gate_plan(runs[0].plan, spec), slowed) if slowed else {}
    return {
        "gate": spec.label,
        "consume": consume,
        "decisions": [asdict(d) for d in decisions],
        "rates": {k: asdict(v) | {"rate": v.rate} for k, v in rates.items()},
        "independence": {
            "per_run": indep.per_run,
            "anova": {
                k: (asdict(v) | {"design_effect": v.design_effect}) if v else None
                for k, v in indep.anova.items()
            },  # fmt: skip
            "independent": indep.independent,
            "material_between": indep.material_between,
            "notes": indep.notes,
        },
        "effective": effective,
        "run_level": run_level,
        "per_run": per_run,
        "per_series": [
            {"series": s, "kind": k, "exits": dict(sorted(c.items()))}
            for (s, k), c in sorted(by_series.items())
        ],
        "replay_agrees": replay_agrees,
        "measured_speedup": measured_slowdown(runs),
        "cost_l4": cost,
        "cost_l4_slowed": cost_slowed,
        "_rates": rates,
    }


def _count(decisions: list[Decision], code: int) -> int:
    return sum(d.exit_code == code for d in decisions)


def render(result: dict) -> str:
    rates: dict[str, Rate] = result["_rates"]
    lines = [f"== operating point: gate {result['gate']} (first/placements/bound), "
             f"chunks by {result['consume']}"]  # fmt: skip
    if len(result["per_run"]) <= RUNS_LISTED:
        for run in result["per_run"]:
            speed = result["measured_speedup"].get(run["run"])
            shown = f"{speed:.4f}x" if speed else "-"
            lines.append(
                f"  run {run['run']} ({run['kind']}): {run['decisions']} decisions, exits "
                f"{run['exits']}; whole-run speedup {shown}"
            )
    else:
        speeds = defaultdict(list)
        for run in result["per_run"]:
            speed = result["measured_speedup"].get(run["run"])
            if speed:
                speeds[run["kind"]].append(speed)
        for row in result["per_series"]:
            lines.append(f"  series {row['series']} ({row['kind']}): exits {row['exits']}")
        for kind, values in speeds.items():
            lines.append(
                f"  {kind}: {len(values)} runs' whole-run speedups, median "
                f"{float(np.median(values)):.4f}x, range {min(values):.4f}-{max(values):.4f}x"
            )
    agrees = result["replay_agrees"]
    if agrees["decisions"]:
        differ = f": differ {agrees['differ']}" if agrees["differ"] else ""
        lines.append(
            f"  the replay against each run's own launch exit: {agrees['agree']} of "
            f"{agrees['decisions']} agree{differ}"
        )
    for key in ("false_alarm", "inconclusive_identical", "pass_identical", "power",
                "inconclusive_slowed", "pass_slowed"):  # fmt: skip
        lines.append(f"  {rates[key].what:36} {_interval(rates[key])}")
    indep = result["independence"]
    lines.append("  independence (a series: a long run's chunks, or one lane's gate runs):")
    for row in indep["per_run"]:
        r1 = "-" if row["lag1"] is None else f"{row['lag1']:+.3f}"
        p = "-" if row["p"] is None else f"{row['p']:.3g}"
        lines.append(
            f"    series {row['run']} ({row['kind']}): n {row['n']}, lag-1 {r1} "
            f"(band ±{row['band']:.3f}), permutation p {p}"
        )
    for kind, a in indep["anova"].items():
        if a is None:
            lines.append(f"    {kind}: ANOVA not possible (fewer than two series of 2+ decisions)")
            continue
        lines.append(
            f"    {kind}: ANOVA over {a['runs']} series, {a['n']} decisions: MS between "
            f"{a['ms_between']:.3g}, within {a['ms_within']:.3g}, F {a['f']:.2f}, permutation p "
            f"{a['p_permutation']:.3g}; var between {a['var_between']:.3g}, within "
            f"{a['var_within']:.3g}, ICC {a['icc']:.3f}, design effect {a['design_effect']:.2f}"
        )
    verdict = (
        "the decisions CAN be treated as independent (no significant lag-1 autocorrelation "
        "within a series, no significant between-series variance)"
        if indep["independent"]
        else "the decisions can NOT all be treated as independent: " + "; ".join(indep["notes"])
    )
    lines.append(f"  => {verdict}")
    for note in indep["notes"]:
        if indep["independent"]:
            lines.append(f"     note: {note}")
    for name, eff in result["effective"].items():
        w = eff["wilson"]
        lines.append(
            f"  {name} with the design effect: effective n {eff['n_effective']:.1f}, Wilson95 "
            f"[{_pct(w[0])}, {_pct(w[1])}]"
        )
    # Per-run rates mean something where runs hold many decisions (long runs), not where
    # each is one (gate runs: the rates above are per run).
    listed = len(result["per_run"]) <= RUNS_LISTED
    if listed and (not indep["independent"] or any(indep["material_between"].values())):
        for name, level in result["run_level"].items():
            shares = ", ".join(_pct(s) for s in level["per_run"])
            lines.append(
                f"  {name} from per-run decisions only: mean of {level['runs']} runs' rates "
                f"{_pct(level['mean'])} ({shares})"
            )
    for key, label in (("cost_l4", "identical"), ("cost_l4_slowed", "slowed")):
        cost = result[key]
        if not cost:
            continue
        lines.append(
            f"  L4 cost per pull request ({label} decisions; runtime model, spot, bundled "
            f"catalog): mean {cost['samples_per_config_mean']:.1f} samples a config "
            f"{cost['samples_per_config']}: ${cost['usd_mean_warm']:.4f} caches warm "
            f"({cost['seconds_mean_warm']:.0f} s), ${cost['usd_mean_cold']:.4f} cold "
            f"({cost['seconds_mean_cold']:.0f} s); at the bound ${cost['usd_bound_warm']:.4f} "
            f"warm, ${cost['usd_bound_cold']:.4f} cold"
        )
    return "\n".join(lines)


# --- the long run's plan and its pace ------------------------------------------------------


def long_plan(base: dict, configs: list[str], rounds: int, per_placement: int) -> dict:
    """A plan of one look: `rounds` samples a config over rounds/per_placement placements,
    our kernel against SDPA with SDPA's A/A control, the named configs of `base`."""
    by_name = {c["name"]: c for c in base["configs"]}
    missing = [c for c in configs if c not in by_name]
    if missing:
        raise SystemExit(f"configs not in the base plan: {', '.join(missing)}")
    if rounds % per_placement:
        raise SystemExit(f"--rounds {rounds} is not a multiple of --per-placement {per_placement}")
    plan = {
        **{k: v for k, v in base.items() if k not in ("configs", "sampling", "profile")},
        "name": "operating-point",
        "description": (
            f"Long run for the gate's operating point (tools/gate/operating_point.py): "
            f"{rounds} samples a config over {rounds // per_placement} placements, one look"
        ),
        "compared_with": ["sdpa"],
        "control": "sdpa",
        "samples_per_config": rounds,
        "placements": rounds // per_placement,
        "sampling": {"max_samples_per_config": rounds},
        "configs": [by_name[c] for c in configs],
    }
    return json.loads(Plan.model_validate(plan).model_dump_json(exclude_none=True))


def pace(run_dir: Path) -> dict:
    """Seconds the benchmark phase took per round of one config, and the run's other
    seconds, from a fetched run's manifest."""
    manifest = Manifest.model_validate_json((run_dir / "manifest.json").read_text())
    benchmark = sum(p.seconds for p in manifest.phases if p.name == "benchmark")
    rounds = (manifest.sampling.samples_per_config if manifest.sampling else 0) * len(
        manifest.plan.configs
    )
    started = manifest.started_at or manifest.finished_at
    wall = (manifest.finished_at - started).total_seconds()
    return {
        "seconds_per_round": benchmark / rounds if rounds else None,
        "benchmark_seconds": benchmark,
        "other_seconds": wall - benchmark,
    }


def series_runs(listing: Path) -> list[LongRun]:
    """The runs of a listing of gate runs (decisions_device.sh): one "SERIES KIND EXIT DIR"
    line a launch, in launch order, DIR relative to the listing's folder; a launch that left
    no run folder is skipped."""
    runs = []
    for line in listing.read_text().splitlines():
        series, kind, code, folder = line.split(maxsplit=3)
        if kind not in KINDS:
            raise SystemExit(f"{listing}: kind {kind!r} is not one of {', '.join(KINDS)}")
        run_dir = listing.parent / folder
        if (run_dir / "results" / "measurements.csv").is_file():
            runs.append(load_long_run(run_dir, kind, series, int(code)))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze")
    a.add_argument("--identical", nargs="*", default=[], type=Path)
    a.add_argument("--slowed", nargs="*", default=[], type=Path)
    a.add_argument(
        "--series", nargs="*", default=[], type=Path, help="gate runs: SERIES KIND EXIT DIR"
    )
    a.add_argument("--gate", action="append", default=None, help="first/placements/bound")
    a.add_argument("--consume", choices=("looks", "bound"), default="looks")
    a.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    a.add_argument("--json", type=Path, default=None)
    p = sub.add_parser("plan")
    p.add_argument("--base", type=Path, default=REPO / "benches" / "plans" / "default.json")
    p.add_argument("--configs", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--per-placement", type=int, required=True)
    p.add_argument("--gate", default=None, help="first/placements/bound: the gate plan itself")
    p.add_argument("out", type=Path)
    s = sub.add_parser("pace")
    s.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "plan":
        base = json.loads(args.base.read_text())
        plan = long_plan(base, args.configs.split(","), args.rounds, args.per_placement)
        if args.gate:
            gate = gated(Plan.model_validate(plan), GateSpec.parse(args.gate))
            plan = json.loads(gate.model_dump_json(exclude_none=True))
        args.out.write_text(json.dumps(plan, indent=2) + "\n")
        return 0
    if args.command == "pace":
        print(json.dumps(pace(args.run_dir)))
        return 0
    runs = [load_long_run(d, "identical") for d in args.identical]
    runs += [load_long_run(d, "slowed") for d in args.slowed]
    runs += [run for listing in args.series for run in series_runs(listing)]
    if not runs:
        raise SystemExit("no runs given")
    results, texts = [], []
    for text in args.gate or DEFAULT_GATES:
        result = analyze(runs, GateSpec.parse(text), args.consume, args.jobs)
        texts.append(render(result))
        results.append({k: v for k, v in result.items() if not k.startswith("_")})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print("\n\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
