"""What `bench launch --json` and `bench fetch --json` print for programs (docs/json.md):
one JSON object on stdout, nothing else there (every other line goes to stderr).

Versioned: a field's meaning never changes under one `schema_version`; a new field with a
default keeps the version, anything else takes a new one. The JSON Schemas are exported
(results_schema/jsonschema/launch-output.schema.json, fetch-output.schema.json).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from results_schema.kernel_contract import UserKernelBuild
from results_schema.models import CorrectnessRow, SummaryRow

PROGRAM_OUTPUT_VERSION = "1"


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class LaunchedRun(_Output):
    """One run a launch started (a sweep starts one per GPU type)."""

    run_id: str = Field(description="what `bench status`, `bench fetch` and `bench stop-all` take")
    backend: str = Field(description="where it runs: local, gce, batch")
    gpu: str | None = Field(default=None, description="the GPU type, where the launch chose one")
    budget_usd: float = Field(ge=0, description="the most the run may cost (its share, in a sweep)")
    worst_case_usd: float = Field(
        ge=0,
        description="the most the run can bill if it runs to its time cap, at the worst "
        "rate it may be billed (spot prices rising to on-demand); 0 for an unbilled run",
    )
    estimated_usd: float = Field(ge=0, description="the runtime model's cost estimate")
    estimated_seconds: int = Field(ge=0, description="the runtime model's estimate of the run")
    max_run_seconds: int = Field(ge=0, description="the time cap the budget buys")
    candidates: list[str] = Field(
        description="the identities ranked against the baseline: the candidate and its "
        "variants (declared [kernel.variants], --candidates revisions)"
    )
    identities: list[str] = Field(description="everything the run times, in plan order")


class LaunchOutput(_Output):
    """`bench launch ... --json`."""

    schema_version: Literal["1"] = PROGRAM_OUTPUT_VERSION
    sweep_id: str | None = Field(default=None, description="with --gpu: the sweep's id")
    runs: list[LaunchedRun] = Field(description="one per run started")
    failed: list[str] = Field(
        default_factory=list, description="with --gpu: one line per GPU type that did not start"
    )


class FetchedRun(_Output):
    """One fetched run's results, per implementation."""

    run_id: str
    status: str = Field(description="the manifest's: complete, partial or failed")
    directory: str = Field(description="where `bench fetch` wrote the run (DEST/<run id>)")
    gpu: str | None = Field(default=None, description="the GPU the run measured on")
    candidate: str | None = Field(default=None, description="the plan's candidate")
    candidates: list[str] = Field(
        default_factory=list, description="the candidate and its variants, in plan order"
    )
    identities: list[str] = Field(default_factory=list, description="everything the run timed")
    summary: list[SummaryRow] = Field(
        default_factory=list,
        description="one row per (config, implementation) with samples (summary.csv)",
    )
    failures: list[CorrectnessRow] = Field(
        default_factory=list,
        description="the failed rows of the correctness gate and of the timed loop's checks: "
        "why an implementation has no row on a config",
    )
    builds: list[UserKernelBuild] = Field(
        default_factory=list, description="how each kernel tree's build went"
    )
    ranking: dict[str, Any] | None = Field(
        default=None,
        description="the run's ranking of its candidates (docs/ranking.md), as its manifest "
        "carries it; null where the run has none",
    )


class FetchOutput(_Output):
    """`bench fetch ... --json`."""

    schema_version: Literal["1"] = PROGRAM_OUTPUT_VERSION
    runs: list[FetchedRun] = Field(description="one per run fetched (a sweep: one per GPU)")
    incomplete: list[str] = Field(
        default_factory=list, description="one line per run that could not be fetched whole"
    )


class RankingDisagreement(_Output):
    """One place where a sweep's GPU types ranked their candidates differently
    (docs/ranking.md): decisions compared, never numbers of different machines."""

    kind: Literal["best", "order", "ranked", "baseline"] = Field(
        description="best: different bests or ties; order: a pair one GPU's intervals "
        "separate one way and another's the other; ranked: a candidate ranked on some GPUs, "
        "left out on others; baseline: speedups over different baselines"
    )
    gpus: list[str] = Field(description="the GPU types concerned")
    candidates: list[str] = Field(description="the identities concerned")
    text: str = Field(description="the same in words, as the report prints it")


class SweepGpuRanking(_Output):
    """One GPU type of a sweep: its run and that run's own ranking."""

    gpu: str = Field(description="the GPU type (gpus.toml's key)")
    run_id: str
    state: str
    ranking: dict[str, Any] | None = Field(
        default=None,
        description="the run's ranking of its candidates (docs/ranking.md), as its manifest "
        "carries it; null where the run has none or was not fetched",
    )


class SweepReportOutput(_Output):
    """`bench report SWEEP --format json`: each GPU type's ranking, and where they disagree."""

    schema_version: Literal["1"] = PROGRAM_OUTPUT_VERSION
    sweep_id: str
    gpus: list[SweepGpuRanking] = Field(description="one per GPU type of the sweep")
    disagreements: list[RankingDisagreement] = Field(
        default_factory=list,
        description="where the rankings disagree; empty when they agree or fewer than two "
        "GPU types have one",
    )
