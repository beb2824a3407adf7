"""launch: validate → launch plan (service/launch_plan.py) → estimate → time cap → spec →
payload → (a cloud backend) account, image → render once, check the request → reserve
(cap) → store → start → record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from orchestrator import budget
from orchestrator.backends.base import GrantsRunAccess, Placement, Rate
from orchestrator.errors import (
    BenchError,
    NoCapacityError,
    PermissionDeniedError,
    QuotaError,
    RefusedError,
    UsageError,
)
from orchestrator.gpus import (
    LOCAL_GPU,
    key_for_accelerator,
    key_for_name,
    load_gpu_catalog,
    local_gpu_name,
)
from orchestrator.paths import ensure_writable
from orchestrator.payload import build_payload
from orchestrator.registry import RunRecord
from orchestrator.render import RunScripts, render_scripts
from orchestrator.runtime_model import (
    HISTORY_HEADROOM,
    RuntimeEstimate,
    history_key,
    model_phases,
    refine,
    with_past_error,
)
from orchestrator.service.context import Context
from orchestrator.service.launch_plan import (
    LaunchPlan,
    make_launch_plan,
    new_spec,
    price,
    repriced,
)
from orchestrator.service.leftover_vms import delete_own_powered_off
from orchestrator.service.plan_options import PlanOptions, with_first_candidates
from orchestrator.service.plans import refuse_unrunnable
from orchestrator.spec import RunSpec
from results_schema import Plan


@dataclass(frozen=True)
class LaunchRequest:
    budget_usd: float
    plan: str = "auto"
    max_runtime_seconds: int | None = None
    options: PlanOptions = PlanOptions()  # A/B comparison, profile
    sweep_id: str | None = None  # a member of a sweep (service/sweep.py)
    gpu: str = ""  # its gpus.toml key
    # Whether fetch may promote what the run builds into the shared cache (service/cache.py).
    cache_trusted: bool = False


@dataclass
class LaunchResult:
    spec: RunSpec
    placement: Placement
    backend_reason: str
    scripts: RunScripts  # as the start sent them (the on-demand retry's, where it ran)
    notes: list[str] = field(default_factory=list)
    rate: Rate | None = None
    estimate: RuntimeEstimate | None = None
    worst_case_usd: float = 0.0  # the most the run can bill at `rate` up to its cap
    gpu: str = ""  # the gpus.toml key the registry files it under


def target_gpu(ctx: Context, backend: str, requested: str = "") -> str:
    """The gpus.toml key of the GPU a run targets, under which the registry files its
    history: `requested` (a sweep member's), else the configured machine's accelerator on
    a backend of catalog machines, else this machine's GPU as `--gpu local` names it. One
    key for one GPU, so a plain launch and a sweep member of the same plan share history."""
    if requested:
        return requested
    catalog = load_gpu_catalog()
    if ctx.capabilities(backend).machine_from_catalog:
        return key_for_accelerator(ctx.config.accelerator_type, catalog) or ""
    return key_for_name(local_gpu_name(), catalog) or LOCAL_GPU


def runtime_estimate(ctx: Context, backend: str, plan: Plan, gpu: str = "") -> RuntimeEstimate:
    """The phase model for this plan here, refined by past complete runs' phase times on
    the same GPU type (`target_gpu`)."""
    model = model_phases(plan, backend, ctx.config.accelerator_type, ctx.config.image_family)
    key = history_key(plan)
    gpu = target_gpu(ctx, backend, gpu)
    # Headroom where the estimate bounds a bill; a free run's estimate is only read.
    headroom = HISTORY_HEADROOM if ctx.capabilities(backend).billed else 1.0
    refined = refine(model, ctx.registry.past_phase_seconds(key, backend, gpu), headroom)
    return with_past_error(refined, ctx.registry.past_estimates(key, backend, gpu))


def launch(
    ctx: Context,
    request: LaunchRequest,
    backend: str,
    backend_reason: str,
    on_validated: Callable[[], None] | None = None,
    planned: LaunchPlan | None = None,
) -> LaunchResult:
    """Validate everything, call `on_validated` (the CLI says what it is about to do: a
    refused launch prints only its error), then write, start and record the run.
    `planned`: the launch plan a sweep made once for all its members; else made here."""
    ctx.require_settings(backend)
    # Resolved once: on the local backend it asks nvidia-smi.
    request = replace(request, gpu=target_gpu(ctx, backend, request.gpu))
    planned = planned or make_launch_plan(request.plan, backend, request.options)
    plan = planned.plan
    refuse_unrunnable(plan, backend)
    notes = list(planned.notes)
    estimate = runtime_estimate(ctx, backend, plan, request.gpu)
    spot = ctx.config.spot
    rate, cap = _price_every_candidate(ctx, request, backend, plan, estimate, spot)
    spec = new_spec(
        ctx,
        backend,
        plan,
        estimate,
        rate,
        cap,
        spot,
        budget_usd=request.budget_usd,
        sweep_id=request.sweep_id,
        cache_trusted=request.cache_trusted,
    )
    # Read the trees before the reservation: a linked or oversized one is refused (exit 2)
    # with nothing recorded.
    payload = build_payload(plan, kernel_trees=planned.kernel_trees)
    ensure_writable(ctx.paths)
    # No credentials is a refusal like any other: nothing recorded (issue 31).
    ctx.store(backend).require_credentials()
    machines = ctx.backend(backend)
    machines.refuse_leftovers()
    # The spec carries the payload's sha256 from here on: the run's reservation records it,
    # so fetch holds even a run whose controller died before `running` to what launch built.
    spec = spec.with_payload(payload)
    # Priced again with the boot disk at the size the start will ask for (on gce the
    # image's, read from Compute now: the checks above sent nothing; 0: nothing billed).
    disk_gb = machines.boot_disk_gb()
    if disk_gb and rate is not None:
        rate, cap = _price_every_candidate(
            ctx, request, backend, plan, estimate, spot, disk_gb=disk_gb
        )
        spec = repriced(spec, rate, cap, spot)
    # The scripts, rendered once from the spec as it now stands (rate and time cap final,
    # the run's grants signed): what the request check below holds to the cloud's limits
    # is byte for byte what the start sends.
    scripts = run_scripts(machines, spec)
    # The request start will send, built now: one the cloud would refuse (gce: metadata
    # over its limits) is a usage error with nothing recorded, written or created (issue
    # 32; on gce only the image and the signatures were read).
    machines.instance_request_json(spec, scripts.startup, scripts.shutdown)
    pricing = ctx.pricing(backend)
    if rate is not None:
        note = machines.leftover_note(
            spec.run_id,
            rate.disk,
            rate.disk_gb,
            spec.max_run_seconds,
            pricing.worst_case_usd(rate, spec.max_run_seconds),
        )
        notes += [note] if note else []
    # The run is in the registry, holding its budget against the monthly cap, before
    # anything is created: a controller killed at any later step leaves a run `status` lists.
    ctx.registry.reserve(
        _launching_record(ctx, backend, spec, request.gpu),
        _spend_check(ctx, request, backend),
    )
    if on_validated is not None:
        on_validated()
    if request.sweep_id is None:  # a sweep's members would race for the same VMs
        notes += delete_own_powered_off(ctx, backend)
    machine_requested = False  # until Backend.start is called, no machine can exist
    try:
        ctx.store(backend).put_bytes(f"{spec.run_prefix}/payload.tar.gz", payload.data)
        machine_requested = True
        placement, spec, rate, scripts = _start(
            ctx, request, backend, spec, scripts, rate, estimate, notes
        )
    except BaseException as error:
        cost = _failed_launch_cost(ctx, spec, rate, error, machine_requested)
        _record_failed_launch(ctx, spec, cost)
        raise
    # On-demand fallback re-plans the rate and the time cap: the record follows the spec.
    planned_fields = {k: v for k, v in spec.record_fields().items() if k != "run_id"}
    ctx.registry.update(
        spec.run_id,
        **planned_fields,
        state="running",
        location=placement.location,
        handle=placement.handle,
        attempts=placement.attempts,
    )
    return LaunchResult(
        spec,
        placement,
        backend_reason,
        scripts,
        notes,
        rate,
        estimate,
        worst_case_usd=0.0 if rate is None else pricing.worst_case_usd(rate, spec.max_run_seconds),
        gpu=request.gpu,
    )


def _price(
    ctx: Context,
    request: LaunchRequest,
    backend: str,
    estimate: RuntimeEstimate,
    spot: bool,
    disk_gb: int | None = None,
    check_minimum: bool = True,
) -> tuple[Rate | None, int]:
    return price(
        ctx,
        backend,
        request.budget_usd,
        request.max_runtime_seconds,
        estimate,
        spot,
        disk_gb=disk_gb,
        check_minimum=check_minimum,
    )


def _price_every_candidate(
    ctx: Context,
    request: LaunchRequest,
    backend: str,
    plan: Plan,
    estimate: RuntimeEstimate,
    spot: bool,
    disk_gb: int | None = None,
) -> tuple[Rate | None, int]:
    """_price, where a refusal of a plan with variants names how many of its candidates
    the budget (or the local time cap) covers: the runtime model counts each one's gate and
    samples (their builds run at once), so fewer may fit where all do not."""
    try:
        return _price(ctx, request, backend, estimate, spot, disk_gb)
    except (RefusedError, UsageError) as refusal:
        if not plan.variants:
            raise
        most = _most_candidates_covered(ctx, request, backend, plan, spot, disk_gb)
        if most == 0:
            raise
        total, last = len(plan.candidates), plan.candidates[most - 1]
        raise type(refusal)(
            f"{refusal} (it covers {most} of the run's {total} candidates, the first through "
            f"{last}: time at most {most}, or raise the budget)"
        ) from None


def _most_candidates_covered(
    ctx: Context,
    request: LaunchRequest,
    backend: str,
    plan: Plan,
    spot: bool,
    disk_gb: int | None,
) -> int:
    """The most of the plan's candidates, first first, a launch of this request could time
    (0: not even the first)."""
    for count in range(len(plan.candidates) - 1, 0, -1):
        fewer = with_first_candidates(plan, count)
        estimate = runtime_estimate(ctx, backend, fewer, request.gpu)
        try:
            _price(ctx, request, backend, estimate, spot, disk_gb)
        except BenchError:
            continue
        return count
    return 0


def _spend_check(ctx: Context, request: LaunchRequest, backend: str):
    """The monthly cap, checked by the registry inside the insert's transaction."""
    if not ctx.capabilities(backend).billed:
        return None
    return lambda committed: budget.check_monthly_cap(
        ctx.config.monthly_cap, committed, request.budget_usd
    )


def _launching_record(ctx: Context, backend: str, spec: RunSpec, gpu: str = "") -> RunRecord:
    return RunRecord(
        **spec.record_fields(),
        state="launching",
        sandbox=ctx.backend(backend).work_dir(spec.run_id),
        gpu=gpu,
    )


# Errors after which nothing can be running or billing: the run cost nothing.
_NOTHING_CREATED = (NoCapacityError, QuotaError, PermissionDeniedError, UsageError)


def _failed_launch_cost(
    ctx: Context,
    spec: RunSpec,
    rate: Rate | None,
    error: BaseException,
    machine_requested: bool,
) -> float:
    """What a launch that did not start counts against the monthly cap: nothing where no
    machine can exist (it failed before the start, or the cloud refused the machine), else
    (a lost insert, an interrupt) the most a machine could bill before the cloud deletes it
    at its time cap."""
    if not machine_requested or isinstance(error, _NOTHING_CREATED) or rate is None:
        return 0.0
    if spec.spot and ctx.config.on_demand_fallback:
        return spec.budget_usd  # an on-demand retry may run, at a rate and cap not kept here
    worst = ctx.pricing(spec.backend).worst_case_usd(rate, spec.max_run_seconds)
    return min(spec.budget_usd, worst)


def _record_failed_launch(ctx: Context, spec: RunSpec, cost_usd: float) -> None:
    ctx.registry.update(
        spec.run_id,
        state="failed",
        finished_at=datetime.now(timezone.utc).isoformat(),
        cost_usd=cost_usd,
    )


def _start(
    ctx: Context,
    request: LaunchRequest,
    backend_name: str,
    spec: RunSpec,
    scripts: RunScripts,
    rate: Rate | None,
    estimate: RuntimeEstimate,
    notes: list[str],
):
    backend = ctx.backend(backend_name)
    try:
        return backend.start(spec, scripts.startup, scripts.shutdown), spec, rate, scripts
    except NoCapacityError as spot_error:
        if not (spec.spot and ctx.config.on_demand_fallback):
            raise
        # Same run, on-demand: the rate is higher, so the budget buys less time. Spot
        # inserts were sent: a budget short of it is check_covers' refusal (exit 3).
        rate, cap = _price(
            ctx,
            request,
            backend_name,
            estimate,
            spot=False,
            disk_gb=backend.boot_disk_gb(),
            check_minimum=False,
        )
        on_demand = repriced(spec, rate, cap, spot=False)
        notes.append(f"no spot capacity ({spot_error}); retrying on-demand at ${rate.total:.4f}/h")
        # Another spec (its rate and time cap are in the script): its own scripts, once.
        scripts = run_scripts(backend, on_demand)
        placement = backend.start(on_demand, scripts.startup, scripts.shutdown)
        return placement, on_demand, rate, scripts


def run_scripts(backend, spec: RunSpec, signed: bool = True) -> RunScripts:
    """The startup and shutdown scripts for this spec on this backend."""
    work_dir = backend.work_dir(spec.run_id)
    variables = backend.template_vars()
    # The run's own grants are signed only for the script a start sends (`bench render`
    # shows the script without them, sending nothing: some 2.5 kB less).
    if signed and isinstance(backend, GrantsRunAccess):
        variables = {**variables, **backend.run_access_vars(spec)}
    return render_scripts(spec, work_dir, variables)
