"""`--json` for programs (`bench launch`, `bench fetch`): one JSON object on stdout, in the
versioned shapes of results_schema/program_output.py (docs/json.md); every line meant for
a person goes to stderr instead, so a program reads stdout whole."""

from __future__ import annotations

import click

from results_schema.program_output import (
    FetchedRun,
    FetchOutput,
    LaunchedRun,
    LaunchOutput,
)


def print_json(output: LaunchOutput | FetchOutput) -> None:
    click.echo(output.model_dump_json())


def launched_run(result) -> LaunchedRun:
    """A started run as launch --json prints it; its worst case at the rate it was
    priced at, up to its time cap (0 where nothing is billed)."""
    spec = result.spec
    return LaunchedRun(
        run_id=spec.run_id,
        backend=spec.backend,
        gpu=result.gpu or None,
        budget_usd=spec.budget_usd,
        worst_case_usd=round(result.worst_case_usd, 6),
        estimated_usd=round(spec.estimated_cost_usd(), 6),
        estimated_seconds=spec.estimated_seconds,
        max_run_seconds=spec.max_run_seconds,
        candidates=spec.plan.candidates,
        identities=spec.plan.identities,
    )


def sweep_output(sweep) -> LaunchOutput:
    """launch --gpu --json: each member that started, and a line per one that did not."""
    return LaunchOutput(
        sweep_id=sweep.sweep_id,
        runs=[launched_run(o.result) for o in sweep.launched],
        failed=[f"{o.member.key}: {o.error}" for o in sweep.failed],
    )


def fetched_run(result) -> FetchedRun:
    """A fetched run's per-implementation results, and its ranking where its manifest
    carries one (docs/ranking.md)."""
    manifest, plan = result.manifest, result.manifest.plan
    environment = manifest.environment
    return FetchedRun(
        run_id=result.run_id,
        status=manifest.status,
        directory=str(result.directory),
        gpu=environment.gpu_name if environment else None,
        candidate=plan.candidate if plan else None,
        candidates=plan.candidates if plan else [],
        identities=plan.identities if plan else [],
        summary=result.summary,
        failures=result.checks,
        builds=manifest.user_builds or [],
        ranking=manifest.model_dump(mode="json").get("ranking"),
    )
