"""The performance gate: judge a fetched A/B run (`launch --fail-on slower`, `report --format`).

Pass means shown not slower: non-inferiority, the design for a claim of "no regression".
Each gated statistic (the geometric mean over configs; with `--gate-on any` each config's
speedup too) is judged by the one verdict rule (results_schema/verdicts.py) at the run's
margin (its plan's `margin`, 2% unless `launch --margin` set another; a report may ask for
another): exit 6 when one lies wholly below 1 - margin, 0 only when every one has its lower
bound at or above 1 - margin and the A/A control is shown equivalent within the margin
(results_schema/gate_rule.py says why), otherwise 7, naming what is undecided and what would
decide it. Before a regression or a pass is believed, the run must be one that can tell: the
candidate correct, enough configs compared, and the A/A control (the same implementation
timed under a second name) not judged different: the run's noise decision (manifest.noise,
one family-wise decision over the control's configs and their mean) at the margin
(gate_policy.noise_reasons).

Flagged configs are not re-run: every config already has several placements (fresh buffers
and graph captures) inside the run, and its interval is a cluster bootstrap over them, so a
false alarm already needs the placements to agree on it. A run that cannot decide has sampled
until its bound already (benches/sequential.py); a second run would cost a second boot,
environment and build (on gce about the whole run's fixed cost again); the CI recipe's
re-run button is that confirmation when someone wants it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from orchestrator import boundary
from orchestrator.errors import UsageError
from orchestrator.gate_policy import DEFAULT_GATE_ON, noise_reasons
from orchestrator.report import RunResults, read_snapshot
from results_schema import CorrectnessRow, SummaryRow
from results_schema.gate_report import (
    GATE_EXIT_CODES,
    GateConfigRow,
    GateFailure,
    GateOn,
    GateOverall,
    GateReport,
    GateRun,
    GateSpeedup,
)
from results_schema.gate_rule import Judged, Statistic, judge_statistics
from results_schema.intervals import CONFIDENCE
from results_schema.models import UNAVAILABLE_BACKEND, Noise
from results_schema.verdicts import verdict

# Fewer configs compared than this share of the plan's is too little to judge a change by.
MIN_COMPARED_SHARE = 0.5
# What the report lists: the slower configs first, then the plan's order, so a cut never
# hides a regression. 100 rows of names bounded at 80 characters stay far below a pull
# request comment's 65,536 characters (a test holds the worst case).
MAX_REPORTED_CONFIGS = 100
MAX_NAME_CHARS = 80
MAX_REASON_CHARS = 300  # one failed check's reason, as the gate shows it
# Beyond this many times the samples taken, "more samples" is no practical advice.
MOST_SAMPLES_FACTOR = 64


@dataclass(frozen=True)
class GateOptions:
    margin: float | None = None  # None: the run's own (its plan's)
    gate_on: GateOn = DEFAULT_GATE_ON


def judge_run_dir(run_dir: Path, options: GateOptions) -> GateReport:
    """The gate's verdict on one published run folder (one copy of it, see read_snapshot)."""
    run, _ = read_snapshot(run_dir)
    return judge(run, run.checks, options)


def judge(run: RunResults, checks: list[CorrectnessRow], options: GateOptions) -> GateReport:
    plan = run.plan
    if plan is None or plan.comparison is None:
        raise UsageError(
            f"run {boundary.printable(run.run_id, 40)} has no A/B comparison to gate on: "
            "launch it with --baseline REF (or --candidate IMPL --baseline-impl IMPL)"
        )
    margin = plan.margin if options.margin is None else options.margin
    candidate, baseline = plan.candidate, plan.comparison.baseline
    noise = run.manifest.noise if run.manifest else None
    overall_lines = (run.manifest.comparison or []) if run.manifest else []
    judged = judge_statistics(plan, run.summary, overall_lines, noise, margin, options.gate_on)
    failures = candidate_failures(checks, candidate)
    incorrect = [f.config for f in failures]
    summary = {(s.config, s.implementation): s for s in run.summary}
    rows = [
        _config_row(c.name, summary, candidate, baseline, failures, margin) for c in plan.configs
    ]
    compared = [r for r in rows if r.comparison is not None]
    slower = [r.config for r in compared if r.comparison.verdict == "slower"]
    undecided = [s.config for s in judged.undecided() if s.config is not None]
    control_different = [i.config for i in (noise.different(margin) if noise else []) if i.config]
    report = GateReport(
        run_id=run.run_id,
        run_status=run.status,
        outcome="pass",
        exit_code=0,
        reasons=[],
        candidate=candidate,
        baseline=baseline,
        baseline_source=_source(plan.comparison),
        margin=margin,
        gate_on=options.gate_on,
        confidence=run.statistics.confidence if run.statistics else CONFIDENCE,
        overall=_line(judged.gated[0], baseline, overall_lines),
        control=_line(judged.control, plan.control_identity, overall_lines),
        control_configs_different=control_different,
        slower_configs=slower,
        undecided_configs=undecided if options.gate_on == "any" else [],
        incorrect_configs=incorrect,
        failures=failures,
        configs_total=len(plan.configs),
        configs_compared=len(compared),
        sampling=run.manifest.sampling if run.manifest else None,
        configs=[],
        run=_run_facts(run),
        ranking=run.manifest.ranking if run.manifest else None,
    )
    outcome, reasons = _outcome(report, judged, noise)
    to_decide = _to_decide(run, judged, margin) if outcome == "inconclusive" else []
    ordered = sorted(rows, key=lambda r: r.config not in slower)  # stable: plan order kept
    return report.model_copy(
        update={
            "outcome": outcome,
            "exit_code": GATE_EXIT_CODES[outcome],
            "reasons": reasons,
            "to_decide": to_decide,
            "configs": ordered[:MAX_REPORTED_CONFIGS],
            "configs_omitted": max(len(ordered) - MAX_REPORTED_CONFIGS, 0),
        }
    )


def candidate_failures(checks: list[CorrectnessRow], candidate: str) -> list[GateFailure]:
    """Each config where the candidate gave a wrong answer or none (not: could not run
    here), with the first failed check's reason."""
    failures: dict[str, GateFailure] = {}
    for check in checks:
        if check.implementation != candidate or check.passed:
            continue
        if check.backend == UNAVAILABLE_BACKEND or check.config in failures:
            continue
        failures[check.config] = GateFailure(
            config=check.config,
            stage=check.stage,
            reason=boundary.printable(check.reason(), MAX_REASON_CHARS),
            max_abs_error=check.max_abs_error,
            tolerance=check.tolerance,
        )
    return list(failures.values())


def _config_row(
    config: str,
    summary: dict[tuple[str, str], SummaryRow],
    candidate: str,
    baseline: str,
    failures: list[GateFailure],
    margin: float,
) -> GateConfigRow:
    c, b = summary.get((config, candidate)), summary.get((config, baseline))
    row = GateConfigRow(
        config=config,
        candidate_ms=c.median_ms if c else None,
        baseline_ms=b.median_ms if b else None,
    )
    flagged = (b and b.flag) or (c and c.flag)  # a flagged row's speed says nothing
    if b is not None and b.versus == candidate and b.speedup is not None and not flagged:
        judged = _judged(b.speedup, b.speedup_ci_low, b.speedup_ci_high, margin)
        return row.model_copy(update={"comparison": judged})
    failed = next((f for f in failures if f.config == config), None)
    if failed is not None:
        note = f"the candidate failed correctness ({failed.stage})"
    elif b is not None and b.flag:
        note = f"flagged {b.flag}"
    elif c is not None and c.flag:
        note = f"the candidate flagged {c.flag}"
    elif c is None:
        note = "the candidate was not timed (failed or unavailable)"
    else:
        note = "the baseline was not timed (failed or unavailable)"
    return row.model_copy(update={"note": note})


def _judged(point, low, high, margin) -> GateSpeedup:
    return GateSpeedup(speedup=point, ci_low=low, ci_high=high, verdict=verdict(low, high, margin))


def _line(stat: Statistic | None, identity: str | None, lines) -> GateOverall | None:
    """A geometric mean's line (the run's comparison.json), judged as the rule judged it."""
    if stat is None or stat.verdict is None:
        return None
    found = next(o for o in lines if o.identity == identity)
    return GateOverall(
        speedup=stat.speedup,
        ci_low=stat.low,
        ci_high=stat.high,
        verdict=stat.verdict,
        identity=identity,
        configs=found.configs,
    )


def _outcome(report: GateReport, judged: Judged, noise: Noise | None) -> tuple[str, list[str]]:
    """The first of: candidate incorrect, a run that cannot tell, regression, undecided,
    pass; with why."""
    margin = percent(report.margin)
    if report.incorrect_configs:
        return "candidate-incorrect", [
            f"the candidate failed correctness on {config_count(len(report.incorrect_configs))}"
        ]
    cannot_tell = _cannot_tell(report, judged.has_control, margin, noise)
    if cannot_tell:
        return "inconclusive", cannot_tell
    slower = judged.slower()
    if slower:
        return "regression", [_slower_reason(slower, margin)]
    undecided = [_undecided_reason(s, report.margin) for s in judged.undecided()]
    if not judged.control_equivalent():
        undecided.append(_control_reason(judged.control, report.margin))
    if undecided:
        return "inconclusive", undecided
    floor = f"{1 - report.margin:.3g} (1 - {margin})"
    every = " and so does every config's" if len(judged.gated) > 1 else ""
    return "pass", [
        f"shown not slower: the geometric mean {_interval(judged.gated[0])} starts at or "
        f"above {floor}{every}; the A/A control {_interval(judged.control)} is equivalent "
        f"within ±{margin}"
    ]


def _slower_reason(slower: list[Statistic], margin: str) -> str:
    mean = [s for s in slower if s.config is None]
    configs = [s for s in slower if s.config is not None]
    parts = []
    if mean:
        parts.append(
            f"the geometric mean {_interval(mean[0])} is slower beyond the {margin} margin"
        )
    if configs:
        are = "is" if len(configs) == 1 else "are"
        parts.append(f"{config_count(len(configs))} {are} slower beyond the {margin} margin")
    return "; ".join(parts)


def _undecided_reason(stat: Statistic, margin: float) -> str:
    floor = f"{1 - margin:.3g} (1 - {percent(margin)})"
    if stat.verdict is None:
        return f"undecided: {stat.label}: {stat.why}"
    return (
        f"undecided: {stat.label} {_interval(stat)} lies across {floor}: neither shown "
        "slower nor shown not slower"
    )


def _control_reason(control: Statistic | None, margin: float) -> str:
    if control is None:
        return "undecided: the A/A control has no geometric mean to vouch for the run"
    return (
        f"undecided: the A/A control {_interval(control)} is not shown equivalent within "
        f"±{percent(margin)}: the run did not show that it tells identical implementations "
        "apart by less than the margin"
    )


def _interval(stat: Statistic) -> str:
    return f"{stat.speedup:.3f}x [{stat.low:.3f}, {stat.high:.3f}]"  # as the table shows it


def _cannot_tell(
    report: GateReport, has_control: bool, margin: str, noise: Noise | None
) -> list[str]:
    reasons = []
    if report.run_status != "complete":
        reasons.append(f"the run is {report.run_status}, not complete")
    needed = max(1, math.ceil(MIN_COMPARED_SHARE * report.configs_total))
    if report.configs_compared < needed:
        reasons.append(
            f"only {report.configs_compared} of {report.configs_total} configs were compared "
            f"(at least {needed} needed)"
        )
    if report.overall is None and report.configs_compared:
        reasons.append("the run has no geometric mean over configs")
    if not has_control:
        reasons.append("the plan has no A/A control, so the run's noise floor is unknown")
    else:
        reasons += noise_reasons(noise, report.margin, margin)
    return reasons


def _to_decide(run: RunResults, judged: Judged, margin: float) -> list[str]:
    """What would decide an undecided run: more samples (with a figure where the intervals
    give one), a plan of longer calls, a GPU."""
    ways = []
    sampling = run.manifest.sampling if run.manifest else None
    if sampling is not None and sampling.stopped in ("time-cap", "max-seconds"):
        ways.append(
            f"more time: sampling stopped at look {sampling.looks} of "
            f"{len(sampling.schedule)}, when the next would have ended after "
            + (
                "the run's time cap (a larger --budget or --max-runtime)"
                if sampling.stopped == "time-cap"
                else "the plan's sampling.max_seconds"
            )
        )
    samples = _samples_needed(run, judged, margin)
    if samples:
        ways.append(samples)
    ways.append(
        "a plan of larger shapes (--plan FILE): longer calls vary less against their own time"
    )
    manifest = run.manifest
    environment = manifest.environment if manifest else None
    if run.plan is not None and run.plan.device == "cpu":
        on = f" ({environment.cpu})" if environment and environment.cpu else ""
        ways.append(f"a GPU: this run timed on the CPU{on}, where calls vary more")
    return [boundary.printable(way, 400) for way in ways]


def _samples_needed(run: RunResults, judged: Judged, margin: float) -> str | None:
    """About how many samples a config would decide what is open, if its point estimates
    held: an interval narrows as 1/sqrt(samples), placements growing with them."""
    taken = _samples_taken(run)
    if not taken:
        return None
    factors = [_narrowing(s, margin) for s in judged.undecided()]
    if judged.has_control and not judged.control_equivalent() and judged.control is not None:
        factors.append(_equivalence_narrowing(judged.control, margin))
    known = [f for f in factors if f is not None]
    if not known:
        return None
    needed = math.ceil(taken * max(known) ** 2)
    if needed > MOST_SAMPLES_FACTOR * taken:
        return (
            f"more samples would take more than {MOST_SAMPLES_FACTOR}x the {taken} a config "
            f"took (about {needed}): a larger plan or a GPU is the practical way"
        )
    return (
        f"more samples: --samples {needed} (about {needed} a config would narrow the "
        f"intervals enough if their estimates hold; this run took {taken})"
    )


def _samples_taken(run: RunResults) -> int:
    """Samples per config this run took: at the look its sampling stopped at."""
    sampling = run.manifest.sampling if run.manifest else None
    if sampling is not None:
        return sampling.samples_per_config
    return run.plan.samples_per_config if run.plan else 0


def _narrowing(stat: Statistic, margin: float) -> float | None:
    """How many times narrower (on the log scale) the interval must get to be decided on
    the side its estimate lies."""
    if stat.verdict is None or stat.speedup is None:
        return None
    floor = 1 - margin
    point = stat.speedup
    if point > floor:
        return math.log(point / stat.low) / math.log(point / floor)
    if point < floor:
        return math.log(stat.high / point) / math.log(floor / point)
    return None


def _equivalence_narrowing(stat: Statistic, margin: float) -> float | None:
    point = stat.speedup
    if point is None or not 1 - margin < point < 1 + margin:
        return None
    low = math.log(point / stat.low) / math.log(point / (1 - margin))
    high = math.log(stat.high / point) / math.log((1 + margin) / point)
    return max(low, high)


def percent(fraction: float) -> str:
    """0.02 -> '2%', 0.025 -> '2.5%'."""
    return f"{fraction * 100:g}%"


def config_count(configs: int) -> str:
    """1 -> '1 config', 2 -> '2 configs': the gate's words land in a pull request."""
    return f"{configs} config" if configs == 1 else f"{configs} configs"


def _source(comparison) -> str:
    if comparison.source == "git":
        return f"git {comparison.ref} ({comparison.commit})"
    if comparison.source == "tree":
        return f"tree {comparison.ref}"
    return "registry implementation"


def _run_facts(run: RunResults) -> GateRun:
    manifest = run.manifest
    if manifest is None:
        return GateRun()
    env, cost = manifest.environment, manifest.cost
    gpu = (env.gpu_name or env.cpu) if env else None
    wall = (
        (manifest.finished_at - manifest.started_at).total_seconds()
        if manifest.started_at
        else None
    )
    return GateRun(
        backend=cost.backend if cost else None,
        gpu=gpu,
        cost_usd=cost.estimated_usd if cost else None,
        rate_usd_per_hour=cost.rate_usd_per_hour if cost else None,
        wall_seconds=max(wall, 0.0) if wall is not None else None,
    )
