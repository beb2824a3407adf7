"""launch --gpu a,b,...: one run per GPU type under one budget (DESIGN.md, "Budget").

The budget is split in proportion to each member's estimated cost (the worst-case bill of
its modelled runtime at its rate: the backend's `worst_case_usd`), so every share buys the
same multiple of what its run needs. Every share is checked before anything is created:
one that cannot cover its run refuses the whole sweep (exit 3). Members then launch in
parallel, each through the ordinary launch (its own registry reservation, time cap and zone
failover); a member that fails (stockout everywhere, quota) is reported and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from orchestrator import budget
from orchestrator.backends.base import PricesRuns, Rate
from orchestrator.errors import BenchError, RefusedError, UsageError
from orchestrator.gpus import (
    LOCAL_GPU,
    GpuType,
    load_gpu_catalog,
    local_gpu_name,
    local_member,
    member_config,
)
from orchestrator.runtime_model import RuntimeEstimate
from orchestrator.service.context import Context
from orchestrator.service.launch import (
    LaunchRequest,
    LaunchResult,
    launch,
    runtime_estimate,
)
from orchestrator.service.launch_plan import LaunchPlan, make_launch_plan, time_cap_seconds
from orchestrator.spec import new_sweep_id
from orchestrator.text import format_duration


@dataclass(frozen=True)
class Member:
    """One GPU type of a sweep, planned: its settings, rate, estimate and budget share."""

    key: str
    gpu: GpuType | None  # None: the local machine's GPU, not in the catalog
    ctx: Context
    rate: Rate | None
    estimate: RuntimeEstimate
    share_usd: float = 0.0
    pricing: PricesRuns | None = None  # its backend's, when its machines bill

    @property
    def estimated_usd(self) -> float:
        """What the run needs: the worst-case bill of a cap as long as its modelled time."""
        if self.rate is None or self.pricing is None:
            return 0.0
        return self.pricing.worst_case_usd(self.rate, self.estimate.total_seconds)


@dataclass
class MemberOutcome:
    member: Member
    result: LaunchResult | None = None
    error: BenchError | None = None


@dataclass
class SweepResult:
    sweep_id: str
    budget_usd: float
    outcomes: list[MemberOutcome] = field(default_factory=list)

    @property
    def launched(self) -> list[MemberOutcome]:
        return [o for o in self.outcomes if o.result is not None]

    @property
    def failed(self) -> list[MemberOutcome]:
        return [o for o in self.outcomes if o.error is not None]


def plan_members(
    ctx: Context, keys: list[str], backend: str, request: LaunchRequest, planned: LaunchPlan
) -> list[Member]:
    """Each member's settings, rate and estimate for the sweep's one launch plan, and its
    share of the budget; RefusedError naming every GPU whose share cannot cover its run."""
    catalog = load_gpu_catalog()
    plan = planned.plan  # an A/B baseline or a profile costs time
    if not ctx.capabilities(backend).machine_from_catalog:
        key = local_member(keys, catalog, local_gpu_name())
        estimate = runtime_estimate(ctx, backend, plan, key)
        return [Member(key, catalog.get(key), ctx, None, estimate, request.budget_usd)]
    ctx.require_settings(backend)
    members = []
    for key in keys:
        gpu = catalog.get(key)
        if gpu is None:  # `local` on a backend of catalog machines
            raise UsageError(f"--gpu {LOCAL_GPU} names this machine's GPU: use --backend local")
        member_ctx = Context(config=member_config(ctx.config, gpu))
        rate = ctx.pricing(backend).run_rate(member_ctx.config, spot=member_ctx.config.spot)
        members.append(
            Member(
                key,
                gpu,
                member_ctx,
                rate,
                runtime_estimate(member_ctx, backend, plan),
                pricing=ctx.pricing(backend),
            )
        )
    members = split_budget(request.budget_usd, members)
    check_shares(request, members)
    return members


def split_budget(total_usd: float, members: list[Member]) -> list[Member]:
    """Shares in proportion to each member's estimated cost (rounded down to 1/10 cent)."""
    needed = sum(m.estimated_usd for m in members)
    return [
        replace(m, share_usd=int(total_usd * m.estimated_usd / needed * 1000) / 1000)
        for m in members
    ]


def member_cap_seconds(member: Member, max_runtime_seconds: int | None) -> int:
    return time_cap_seconds(member.pricing, member.share_usd, member.rate, max_runtime_seconds)


def check_shares(request: LaunchRequest, members: list[Member]) -> None:
    short = [
        m
        for m in members
        if member_cap_seconds(m, request.max_runtime_seconds) < m.estimate.total_seconds
    ]
    if not short:
        return
    needed = sum(m.estimated_usd for m in members)
    lines = [
        f"{m.key}'s share ${m.share_usd:.3f} buys "
        f"{format_duration(member_cap_seconds(m, request.max_runtime_seconds))} at "
        f"${m.rate.total:.4f}/h, but its run needs about "
        f"{format_duration(m.estimate.total_seconds)} (≈ ${m.estimated_usd:.3f})"
        for m in short
    ]
    raise RefusedError(
        f"budget ${request.budget_usd:.2f} split across {', '.join(m.key for m in members)} "
        f"in proportion to their estimates: {'; '.join(lines)}. The sweep needs about "
        f"${needed:.2f}; raise --budget or leave {', '.join(m.key for m in short)} out. "
        "Nothing was created"
    )


def launch_sweep(
    ctx: Context,
    request: LaunchRequest,
    keys: list[str],
    backend: str,
    backend_reason: str,
    on_validated: Callable[[list[Member]], None] | None = None,
) -> SweepResult:
    # Resolved and shaped once (a baseline's tree read once), launched by every member.
    planned = make_launch_plan(request.plan, backend, request.options)
    members = plan_members(ctx, keys, backend, request, planned)
    ctx.store(backend).require_credentials()  # one error for the sweep, not one per GPU
    ctx.backend(backend).refuse_leftovers()  # one line for the sweep, not one per GPU
    if ctx.capabilities(backend).billed:
        # The whole sweep's worst case against the monthly cap before any member reserves.
        budget.check_monthly_cap(
            ctx.config.monthly_cap, ctx.registry.committed_this_month(), request.budget_usd
        )
    if on_validated is not None:
        on_validated(members)
    sweep = SweepResult(new_sweep_id(), request.budget_usd)
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        sweep.outcomes = list(
            pool.map(
                lambda m: _launch_member(m, request, planned, sweep, backend, backend_reason),
                members,
            )
        )
    return sweep


def _launch_member(
    member: Member,
    request: LaunchRequest,
    planned: LaunchPlan,
    sweep: SweepResult,
    backend: str,
    reason: str,
) -> MemberOutcome:
    member_request = replace(
        request, budget_usd=member.share_usd, sweep_id=sweep.sweep_id, gpu=member.key
    )
    try:
        result = launch(member.ctx, member_request, backend, reason, planned=planned)
        return MemberOutcome(member, result=result)
    except BenchError as error:  # reported with the others; the registry row says failed
        return MemberOutcome(member, error=error)
