"""estimate: what a run of a plan on a cloud backend costs, phase by phase, on its first and
later runs, with the price catalog it is priced from (`bench prices`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.backends import registry
from orchestrator.backends.base import (
    BudgetTerms,
    CatalogRead,
    Rate,
    ShowsPriceCatalog,
    SplitsBudget,
)
from orchestrator.backends.registry import default_cloud
from orchestrator.errors import RefusedError, UsageError
from orchestrator.gpus import GpuType, load_gpu_catalog
from orchestrator.runtime_model import RuntimeEstimate, model_phases
from orchestrator.service.context import Context
from orchestrator.service.launch import runtime_estimate
from orchestrator.service.plans import resolve_plan
from results_schema import Plan


@dataclass(frozen=True)
class CloudEstimate:
    plan: Plan
    rate: Rate  # gce's: its price_source says which catalog, of which date
    first_run: RuntimeEstimate  # empty caches
    later_runs: RuntimeEstimate  # the store's caches hold this run's environment and build
    launch: RuntimeEstimate  # what launch budgets with: the first run, refined by past runs


def gce_estimate(
    ctx: Context, plan_ref: str = "default", backend: str | None = None
) -> CloudEstimate:
    """The configured machine on `backend` (default: the first billed one registered) at
    the configured provisioning model's rate, from gce's `pricing.price_catalog` (the last Cloud
    Billing Catalog API read under a week old, else the bundled catalog; `rate.price_source`
    names which and its date), the boot disk at its configured size or the catalog's
    assumed image size: nothing here calls the cloud."""
    config = ctx.config
    backend = backend or default_cloud()
    plan, _ = resolve_plan(plan_ref, backend)
    rate = ctx.pricing(backend).run_rate(config, spot=config.spot)

    def modelled(warm: bool) -> RuntimeEstimate:
        return model_phases(plan, backend, config.accelerator_type, config.image_family, warm=warm)

    launch = runtime_estimate(ctx, backend, plan)
    return CloudEstimate(plan, rate, modelled(False), modelled(True), launch)


@dataclass(frozen=True)
class PriceSheet:
    """What `bench prices` shows: the catalog, the plan's estimate at its rate, what $1.00
    buys there and on each backend whose cloud retries a run, and the GPU types."""

    catalog: dict  # the first billed backend's (`ShowsPriceCatalog.price_catalog`)
    estimate: CloudEstimate
    one_dollar_seconds: int  # the time cap $1.00 buys at the estimate's rate
    rate_text: str  # the estimate's rate as a refusal names it
    # Backend name -> (its title, what $1.00 buys there; a string: the refusal).
    one_dollar_attempts: dict[str, tuple[str, BudgetTerms | str]]
    gpu_types: dict[str, GpuType]  # those `launch --gpu` takes


def price_sheet(
    ctx: Context,
    plan_ref: str = "default",
    on_refreshed: Callable[[CatalogRead], None] | None = None,
) -> PriceSheet:
    """The sheet for the first billed backend; with `on_refreshed`, its catalog is read from
    the cloud first (a call to it) and what the read found handed over before the rest is
    worked out. Nothing else calls the cloud."""
    backend = default_cloud()
    pricing = ctx.pricing(backend)
    if not issubclass(pricing, ShowsPriceCatalog):  # a billed backend without a catalog
        raise UsageError(f"the {backend} backend has no price catalog to show")
    if on_refreshed is not None:
        on_refreshed(pricing.refresh_price_catalog(ctx.config))
    catalog = pricing.price_catalog(ctx.config)
    estimate = gce_estimate(ctx, plan_ref, backend)
    return PriceSheet(
        catalog=catalog,
        estimate=estimate,
        one_dollar_seconds=pricing.max_run_seconds_for(1.0, estimate.rate),
        rate_text=pricing.rate_text(estimate.rate),
        one_dollar_attempts=split_budgets(ctx, plan_ref, 1.0),
        gpu_types=load_gpu_catalog(),
    )


def split_budgets(
    ctx: Context, plan_ref: str, budget_usd: float
) -> dict[str, tuple[str, BudgetTerms | str]]:
    """Backend name -> (its title, what `budget_usd` buys there), for each backend whose
    cloud retries a run (`SplitsBudget`), priced as its launch would price the plan: the
    same rate, time cap and estimate; the refusal's text where not one attempt fits."""
    found: dict[str, tuple[str, BudgetTerms | str]] = {}
    for name in registry.names():
        cls = registry.backend_class(name)
        if not issubclass(cls, SplitsBudget):
            continue
        estimate = gce_estimate(ctx, plan_ref, backend=name)
        rate = estimate.rate
        cap = cls.max_run_seconds_for(budget_usd, rate)
        terms: BudgetTerms | str
        try:
            terms = cls.budget_terms(
                ctx.config, budget_usd, rate, estimate.launch.total_seconds, cap
            )
        except RefusedError as e:
            terms = str(e)
        found[name] = (registry.capabilities(name).title, terms)
    return found
