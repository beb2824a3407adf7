"""The performance gate's verdict on one A/B run: what `bench report --format json` prints
and `bench launch --fail-on slower` writes as gate.json (exported as gate-report.schema.json).

Versioned: a field's meaning never changes under one `schema_version`; a new field with a
default keeps the version, anything else takes a new one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from results_schema.models import CheckStage, GateOn, SamplingRecord, Verdict
from results_schema.ranking import Ranking

# 2: a pass means shown not slower (non-inferiority), verdicts not-slower and undecided,
# what would decide an undecided run, each failed check's reason (issue 49).
GATE_SCHEMA_VERSION = "2"
GateOutcome = Literal["pass", "regression", "inconclusive", "candidate-incorrect"]
# The exit code of each outcome: after bench's own codes (0-5, 130), never one of them.
GATE_EXIT_CODES: dict[str, int] = {
    "pass": 0,
    "regression": 6,
    "inconclusive": 7,
    "candidate-incorrect": 8,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class GateSpeedup(_Strict):
    """A speedup of the candidate (> 1: faster) with its interval (at the report's
    `confidence`), judged at the gate's margin by results_schema/verdicts.py."""

    speedup: float = Field(gt=0)
    ci_low: float = Field(gt=0)
    ci_high: float = Field(gt=0)
    verdict: Verdict = Field(
        description="at the gate's margin: slower, or shown not slower (faster, equivalent, "
        "not-slower), or undecided"
    )


class GateOverall(GateSpeedup):
    """A geometric mean over configs (the run's comparison.json line)."""

    identity: str = Field(description="the identity compared with the candidate (or its twin)")
    configs: int = Field(ge=1, description="configs the geometric mean covers")


class GateConfigRow(_Strict):
    """One config: the candidate's and the baseline's medians and the speedup, if timed."""

    config: str
    candidate_ms: float | None = Field(default=None, gt=0)
    baseline_ms: float | None = Field(default=None, gt=0)
    comparison: GateSpeedup | None = Field(
        default=None, description="None: not compared (failed, unavailable or flagged)"
    )
    note: str = Field(default="", description="why the config was not compared")


class GateFailure(_Strict):
    """A check the candidate failed on a config (correctness.csv, timed_checks.csv): the
    first one, with its reason in one line and its error against the tolerance."""

    config: str
    stage: CheckStage
    reason: str
    max_abs_error: float | None = Field(default=None, ge=0)
    tolerance: float | None = Field(default=None, ge=0)


class GateRun(_Strict):
    """Where and for how much the run was measured."""

    backend: str | None = None
    gpu: str | None = Field(default=None, description="the GPU (or CPU) the run measured on")
    cost_usd: float | None = Field(default=None, ge=0, description="as the controller bills it")
    rate_usd_per_hour: float | None = Field(default=None, ge=0)
    wall_seconds: float | None = Field(default=None, ge=0)


class GateReport(_Strict):
    """The gate's outcome, the geometric mean, the A/A control, and every config."""

    schema_version: Literal["2"] = GATE_SCHEMA_VERSION
    run_id: str
    run_status: str
    outcome: GateOutcome
    exit_code: int = Field(description="what `--fail-on` exits with for this outcome")
    reasons: list[str] = Field(description="why this outcome, one line each")
    candidate: str
    baseline: str
    baseline_source: str = Field(description="git, tree or implementation, and the ref")
    margin: float = Field(
        ge=0,
        lt=1,
        description="a regression's interval lies below 1 - margin, a pass's lower bound at "
        "or above it; the run's own margin unless the report was asked for another",
    )
    gate_on: GateOn
    confidence: float = Field(gt=0, lt=1, description="the intervals' confidence level")
    overall: GateOverall | None = None
    control: GateOverall | None = Field(
        default=None, description="the A/A control over its twin: the run's noise floor"
    )
    control_configs_different: list[str] = Field(
        default_factory=list, description="configs where the A/A control was judged different"
    )
    slower_configs: list[str] = Field(default_factory=list)
    undecided_configs: list[str] = Field(
        default_factory=list,
        description="gate_on any: configs neither shown slower nor shown not slower (the "
        "geometric mean's own verdict is in `overall`)",
    )
    to_decide: list[str] = Field(
        default_factory=list, description="inconclusive: what would decide the run, one each"
    )
    incorrect_configs: list[str] = Field(
        default_factory=list, description="configs where the candidate failed correctness"
    )
    failures: list[GateFailure] = Field(
        default_factory=list, description="each config's first failed check of the candidate"
    )
    configs_total: int = Field(ge=0)
    configs_compared: int = Field(ge=0)
    sampling: SamplingRecord | None = Field(
        default=None, description="how long the run sampled and why it stopped"
    )
    configs: list[GateConfigRow] = Field(description="slower configs first, then plan order")
    configs_omitted: int = Field(
        default=0, ge=0, description="rows left out to keep the report within its size bound"
    )
    run: GateRun = Field(default_factory=GateRun)
    ranking: Ranking | None = Field(
        default=None,
        description="the run's candidates ranked by speedup over the baseline with "
        "simultaneous intervals, as the run made it (ranking.json: docs/ranking.md)",
    )
