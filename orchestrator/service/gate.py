"""The performance gate: judge a fetched A/B run (`launch --fail-on slower`, `report --format`).

A regression is the candidate judged `slower` at the gate's margin: its speedup interval lies
wholly below 1 - margin. The run's own verdicts use the plan's δ (1%); the gate re-judges the
same intervals at its margin (default 2%, `DEFAULT_MARGIN`), on the geometric mean over
configs (default) or on any single config. Before a regression is believed, the run must be
one that can tell: the candidate correct, enough configs compared, and the A/A control (the
same implementation timed under a second name) not judged different: the run's noise
decision (manifest.noise, one family-wise decision over the control's configs and their
mean) re-judged at the gate's margin (gate_policy.noise_reasons).

Flagged configs are not re-run: every config already has several placements (fresh buffers
and graph captures) inside the run, and its interval is a cluster bootstrap over them, so a
false alarm already needs the placements to agree on it. A second run would cost a second
boot, environment and build (on gce about the whole run's fixed cost again); the CI recipe's
re-run button is that confirmation when someone wants it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from orchestrator import boundary
from orchestrator.errors import UsageError
from orchestrator.gate_policy import DEFAULT_GATE_ON, DEFAULT_MARGIN, noise_reasons
from orchestrator.report import RunResults, read_snapshot
from results_schema import CorrectnessRow, OverallSpeedup, SummaryRow
from results_schema.gate_report import (
    GATE_EXIT_CODES,
    GateConfigRow,
    GateOn,
    GateOverall,
    GateReport,
    GateRun,
    GateSpeedup,
)
from results_schema.models import Noise
from results_schema.verdicts import verdict

# Fewer configs compared than this share of the plan's is too little to judge a change by.
MIN_COMPARED_SHARE = 0.5
# What the report lists: the slower configs first, then the plan's order, so a cut never
# hides a regression. 100 rows of names bounded at 80 characters stay far below a pull
# request comment's 65,536 characters (a test holds the worst case).
MAX_REPORTED_CONFIGS = 100
MAX_NAME_CHARS = 80
UNAVAILABLE_BACKEND = "unavailable"  # benches.correctness: a kernel that cannot run here


@dataclass(frozen=True)
class GateOptions:
    margin: float = DEFAULT_MARGIN
    gate_on: GateOn = DEFAULT_GATE_ON


def judge_run_dir(run_dir: Path, options: GateOptions) -> GateReport:
    """The gate's verdict on one published run folder (one copy of it, see read_snapshot)."""
    run, _ = read_snapshot(run_dir)
    return judge(run, correctness_rows(run_dir, run), options)


def correctness_rows(run_dir: Path, run: RunResults) -> list[CorrectnessRow]:
    """The correctness gate's rows and the checks on outputs from the timed loop."""
    rows: list[CorrectnessRow] = []
    for name in ("correctness.csv", "timed_checks.csv"):
        path = run_dir / "results" / name
        if path.is_file():
            rows += boundary.checked_rows(path, name, run.run_id, plan=run.plan)
    return rows


def judge(run: RunResults, checks: list[CorrectnessRow], options: GateOptions) -> GateReport:
    plan = run.plan
    if plan is None or plan.comparison is None:
        raise UsageError(
            f"run {boundary.printable(run.run_id, 40)} has no A/B comparison to gate on: "
            "launch it with --baseline REF (or --candidate IMPL --baseline-impl IMPL)"
        )
    candidate, baseline = plan.candidate, plan.comparison.baseline
    summary = {(s.config, s.implementation): s for s in run.summary}
    incorrect = _incorrect_configs(checks, candidate)
    rows = [
        _config_row(c.name, summary, candidate, baseline, incorrect, options.margin)
        for c in plan.configs
    ]
    compared = [r for r in rows if r.comparison is not None]
    slower = [r.config for r in compared if r.comparison.verdict == "slower"]
    overall = _overall(run, baseline, options.margin)
    control = _overall(run, plan.control_identity, options.margin) if plan.control else None
    noise = run.manifest.noise if run.manifest else None
    control_different = [
        i.config for i in (noise.different(options.margin) if noise else []) if i.config
    ]
    report = GateReport(
        run_id=run.run_id,
        run_status=run.status,
        outcome="pass",
        exit_code=0,
        reasons=[],
        candidate=candidate,
        baseline=baseline,
        baseline_source=_source(plan.comparison),
        margin=options.margin,
        gate_on=options.gate_on,
        overall=overall,
        control=control,
        control_configs_different=control_different,
        slower_configs=slower,
        incorrect_configs=incorrect,
        configs_total=len(plan.configs),
        configs_compared=len(compared),
        configs=[],
        run=_run_facts(run),
    )
    outcome, reasons = _outcome(report, has_control=plan.control is not None, noise=noise)
    ordered = sorted(rows, key=lambda r: r.config not in slower)  # stable: plan order kept
    return report.model_copy(
        update={
            "outcome": outcome,
            "exit_code": GATE_EXIT_CODES[outcome],
            "reasons": reasons,
            "configs": ordered[:MAX_REPORTED_CONFIGS],
            "configs_omitted": max(len(ordered) - MAX_REPORTED_CONFIGS, 0),
        }
    )


def _incorrect_configs(checks: list[CorrectnessRow], candidate: str) -> list[str]:
    """Configs where the candidate gave a wrong answer (not: could not run here)."""
    failed = [
        c.config
        for c in checks
        if c.implementation == candidate and not c.passed and c.backend != UNAVAILABLE_BACKEND
    ]
    return list(dict.fromkeys(failed))


def _config_row(
    config: str,
    summary: dict[tuple[str, str], SummaryRow],
    candidate: str,
    baseline: str,
    incorrect: list[str],
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
        judged = _judged(b.speedup, b.speedup_ci_low, b.speedup_ci_high, margin, b.verdict)
        return row.model_copy(update={"comparison": judged})
    if config in incorrect:
        note = "the candidate failed correctness"
    elif b is not None and b.flag:
        note = f"flagged {b.flag}"
    elif c is not None and c.flag:
        note = f"the candidate flagged {c.flag}"
    elif c is None:
        note = "the candidate was not timed (failed or unavailable)"
    else:
        note = "the baseline was not timed (failed or unavailable)"
    return row.model_copy(update={"note": note})


def _judged(point, low, high, margin, plan_verdict) -> GateSpeedup:
    return GateSpeedup(
        speedup=point,
        ci_low=low,
        ci_high=high,
        verdict=verdict(low, high, margin),
        plan_verdict=plan_verdict,
    )


def _overall(run: RunResults, identity: str | None, margin: float) -> GateOverall | None:
    """The run's geometric mean over configs for this identity, judged at the gate's margin."""
    found: OverallSpeedup | None = (
        next(
            (o for o in (run.manifest.comparison or []) if o.identity == identity),
            None,
        )
        if run.manifest
        else None
    )
    if found is None:
        return None
    judged = _judged(found.geomean, found.ci_low, found.ci_high, margin, found.verdict)
    return GateOverall(**judged.model_dump(), identity=identity, configs=found.configs)


def _outcome(report: GateReport, has_control: bool, noise: Noise | None) -> tuple[str, list[str]]:
    """The first of: candidate incorrect, inconclusive, regression, pass; with why."""
    margin = percent(report.margin)
    if report.incorrect_configs:
        return "candidate-incorrect", [
            f"the candidate failed correctness on {config_count(len(report.incorrect_configs))}"
        ]
    inconclusive = _inconclusive_reasons(report, has_control, margin, noise)
    if inconclusive:
        return "inconclusive", inconclusive
    overall, slower = report.overall, report.slower_configs
    reasons = []
    if overall is not None and overall.verdict == "slower":
        reasons.append(f"the geometric mean is slower beyond the {margin} margin")
    if report.gate_on == "any" and slower:
        are = "is" if len(slower) == 1 else "are"
        reasons.append(f"{config_count(len(slower))} {are} slower beyond the {margin} margin")
    if reasons:
        return "regression", reasons
    word = overall.verdict if overall else "indistinguishable"
    if word == "faster":
        return "pass", [f"faster: the geometric mean is faster beyond the {margin} margin"]
    if word == "equivalent":
        return "pass", [f"no change: the geometric mean is within ±{margin}"]
    return "pass", [
        f"no change detected: the geometric mean's interval straddles the ±{margin} margin "
        "(indistinguishable never fails)"
    ]


def _inconclusive_reasons(
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
