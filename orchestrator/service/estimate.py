"""estimate: what a run of a plan on a cloud backend costs, phase by phase, on its first and
later runs (`bench prices`)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends.base import Rate
from orchestrator.backends.registry import default_cloud
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
