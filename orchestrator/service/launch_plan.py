"""One launch plan, built once, and the time-cap rule's one home.

`make_launch_plan` resolves the plan a launch names and shapes it by the launch's options
(an A/B baseline's tree read from git, a profile, peers): a launch, every member of a sweep
and `bench render` share what it returns, so no tree is read twice. `price` applies the
time-cap rule (`time_cap_seconds`) and its refusals at a rate; `new_spec` builds a run's
RunSpec once, and `repriced` carries a new rate and cap into it (the boot disk's real size,
the on-demand fallback) without building another.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator import budget
from orchestrator.backends.base import PricesRuns, Rate
from orchestrator.kernel_tree.user import read_candidate
from orchestrator.payload import TreeFiles
from orchestrator.runtime_model import RuntimeEstimate
from orchestrator.service.context import Context
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from orchestrator.spec import RunSpec, new_run_id
from orchestrator.users import owner_label
from results_schema import Plan


@dataclass(frozen=True)
class LaunchPlan:
    """The plan as the launch runs it, with what resolving and shaping it had to say and
    the kernel trees (folder in the payload, files) its payload carries."""

    plan: Plan
    notes: tuple[str, ...] = ()
    kernel_trees: tuple[tuple[str, TreeFiles], ...] = ()


def make_launch_plan(plan_ref: str, backend: str, options: PlanOptions) -> LaunchPlan:
    # A user's tree is read once: its contract may name the plan, and the plan carries it.
    candidate = read_candidate(options.kernel) if options.kernel is not None else None
    plan, plan_note = resolve_plan(plan_ref, backend, candidate=candidate)
    shaped = shape_plan(plan, options, candidate=candidate)
    notes = ((plan_note,) if plan_note else ()) + shaped.notes
    return LaunchPlan(shaped.plan, notes, shaped.kernel_trees)


def time_cap_seconds(
    pricing: PricesRuns | None,
    budget_usd: float,
    rate: Rate | None,
    max_runtime_seconds: int | None,
) -> int:
    """The time cap a run gets: on a billed backend the longest whose worst case stays
    within the budget at the rate, else the local cap; `--max-runtime` only lowers it."""
    if pricing is None or rate is None:
        local = budget.LOCAL_DEFAULT_MAX_RUN_SECONDS
        return min(max_runtime_seconds or local, local)
    cap = pricing.max_run_seconds_for(budget_usd, rate)
    return min(cap, max_runtime_seconds) if max_runtime_seconds else cap


def price(
    ctx: Context,
    backend: str,
    budget_usd: float,
    max_runtime_seconds: int | None,
    estimate: RuntimeEstimate,
    spot: bool,
    disk_gb: int | None = None,
    check_minimum: bool = True,
) -> tuple[Rate | None, int]:
    """The rate (None: an unbilled run) and the time cap, or the refusal.

    On a billed backend the boot disk is priced at `disk_gb` (the image's size, once read)
    else the backend's assumption; `check_minimum`: a budget that cannot even boot the
    machine is a usage error (exit 2), refused before anything is sent; a cap shorter than
    the estimate is RefusedError (exit 3). An unbilled run is free, bounded by the local
    time cap (a plan longer than it is a usage error)."""
    estimated = estimate.total_seconds
    if not ctx.capabilities(backend).billed:
        cap = time_cap_seconds(None, budget_usd, None, max_runtime_seconds)
        budget.check_fits_local_cap(estimated, cap)
        return None, cap
    pricing = ctx.pricing(backend)
    rate = pricing.run_rate(ctx.config, spot=spot, disk_gb=disk_gb)
    if check_minimum:
        pricing.check_buys_a_start(budget_usd, rate, estimate.seconds_of("boot"))
    cap = time_cap_seconds(pricing, budget_usd, rate, max_runtime_seconds)
    pricing.check_covers(budget_usd, rate, estimated, cap)
    return rate, cap


def new_spec(
    ctx: Context,
    backend: str,
    plan: Plan,
    estimate: RuntimeEstimate,
    rate: Rate | None,
    cap_seconds: int,
    spot: bool,
    *,
    budget_usd: float,
    sweep_id: str | None = None,
    cache_trusted: bool = False,
) -> RunSpec:
    """A new run's spec, its id drawn now: built once a launch."""
    return RunSpec(
        run_id=new_run_id(),
        backend=backend,
        plan=plan,
        owner=owner_label(ctx.config.owner),
        budget_usd=budget_usd,
        rate_usd_per_hour=rate.total if rate is not None else 0.0,
        max_run_seconds=cap_seconds,
        estimated_seconds=estimate.total_seconds,
        payload_sha256="0" * 64,
        spot=spot and rate is not None,
        sweep_id=sweep_id,
        cache_trusted=cache_trusted,
    )


def repriced(spec: RunSpec, rate: Rate, cap_seconds: int, spot: bool) -> RunSpec:
    """The same run at another rate and cap (its id, payload and trees kept)."""
    return spec.model_copy(
        update={"rate_usd_per_hour": rate.total, "max_run_seconds": cap_seconds, "spot": spot}
    )
