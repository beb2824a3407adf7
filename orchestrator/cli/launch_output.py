"""What a launch prints: the plan, the estimate, the rate, where it runs, and (after a
Ctrl-C during --wait) that the runs go on. Shared by one launch (cli/launch.py) and a
sweep's members (cli/sweep_output.py), which import it and not each other."""

from __future__ import annotations

from orchestrator.cli.options import bench_command
from orchestrator.cli.wrap import echo


def say_runs_go_on(what: str, status_ref: str) -> None:
    """Ctrl-C during --wait stops the following, never the runs: say so, and how to stop them."""
    bench = bench_command()
    echo(
        f"bench: stopped following; {what}. Follow: {bench} status {status_ref} · stop "
        f"every bench machine: {bench} stop-all",
        err=True,
    )


def how_it_ends(result) -> str:
    from orchestrator.backends.registry import capabilities
    from orchestrator.text import format_duration

    cap = format_duration(result.spec.max_run_seconds)
    declared = capabilities(result.spec.backend)
    if declared.billed:
        return f"its {declared.machine_noun} runs, and bills, until the run ends or its {cap} cap"
    return f"its {declared.machine_noun} runs here until the run ends or its {cap} cap"


def print_launch(out, result) -> None:
    from orchestrator.text import format_duration, markup_safe

    spec, placement = result.spec, result.placement
    for note in result.notes:
        out.print(f"[bold yellow]bench: note:[/] {note}")
    plan = spec.plan
    looks = plan.look_schedule()  # an A/B run samples until decided, up to the last
    until = f" (up to {looks[-1]} until decided)" if len(looks) > 1 else ""
    timed = plan.implementations
    if plan.variants:  # every candidate is timed, then the peers
        timed = [f"the {len(plan.candidates)} candidates below", *timed[1:]]
    count = len(plan.candidates) + len(plan.implementations) - 1
    out.print(
        f"bench: plan [bold]{plan.name}[/]: {len(plan.configs)} configs × "
        f"{plan.samples_per_config} samples{until} × {count} "
        f"implementations ({markup_safe(', '.join(timed))})"
    )
    if plan.variants:
        # '<name>[<variant>]' is rich markup unless escaped.
        out.print(
            f"bench: {len(plan.candidates)} candidates, each gated and timed in every round: "
            + markup_safe(", ".join(plan.candidates))
        )
    for attempt in placement.attempts:
        out.print(f"bench: tried {attempt}")
    if result.estimate is not None:
        out.print(
            "bench: estimate by phase: "
            + ", ".join(f"{p.phase} {p.seconds:.0f}s" for p in result.estimate.phases)
            + " (bench's phase model, refined by past runs of this plan)"
        )
        out.print(f"bench: estimate's error: {result.estimate.error_note()}")
    cost = f"≈ ${spec.estimated_cost_usd():.2f}" if spec.rate_usd_per_hour else "free"
    if result.rate is not None and result.rate.catalog_date:
        from orchestrator.text import markup_safe

        out.print(f"bench: prices from {markup_safe(result.rate.price_source)}")
        if result.rate.price_warning:
            out.print(f"[bold yellow]bench: warning:[/] {markup_safe(result.rate.price_warning)}")
    out.print(
        f"bench: rate ${spec.rate_usd_per_hour:.4f}/h{' (spot)' if spec.spot else ''} · "
        f"time cap {format_duration(spec.max_run_seconds)} · estimated "
        f"{format_duration(spec.estimated_seconds)} ({cost}) · budget ${spec.budget_usd:.2f}"
    )
    out.print(
        f"bench: launched run [bold]{spec.run_id}[/] in {placement.location} ({placement.handle})"
    )
