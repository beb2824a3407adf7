"""render: the scripts (and, on gce, the instance request) a launch would produce."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.payload import build_payload
from orchestrator.runtime_model import RuntimeEstimate
from orchestrator.service.context import Context
from orchestrator.service.launch import run_scripts, runtime_estimate
from orchestrator.service.launch_plan import make_launch_plan, new_spec, price
from orchestrator.service.plan_options import PlanOptions


@dataclass
class Rendered:
    startup: str
    shutdown: str
    instance_json: str | None = None
    estimate: RuntimeEstimate | None = None
    rate_usd_per_hour: float = 0.0


def render_scripts(
    ctx: Context,
    backend_name: str,
    plan_ref: str,
    budget_usd: float,
    kernel: Path | None = None,
    peers: tuple[str, ...] = (),
) -> Rendered:
    """What a launch of this plan (and of the user's kernel at `kernel`, and the public
    `peers`) would run: the launch's own plan, time cap, spec and scripts."""
    planned = make_launch_plan(plan_ref, backend_name, PlanOptions(kernel=kernel, peers=peers))
    estimate = runtime_estimate(ctx, backend_name, planned.plan)
    spot = ctx.config.spot
    rate, cap = price(ctx, backend_name, budget_usd, None, estimate, spot)
    spec = new_spec(
        ctx, backend_name, planned.plan, estimate, rate, cap, spot, budget_usd=budget_usd
    )
    payload = build_payload(planned.plan, kernel_trees=planned.kernel_trees)
    spec = spec.with_payload(payload)
    backend = ctx.backend(backend_name)
    scripts = run_scripts(backend, spec, signed=False)
    instance_json = backend.instance_request_json(spec, scripts.startup, scripts.shutdown)
    return Rendered(
        scripts.startup, scripts.shutdown, instance_json, estimate, spec.rate_usd_per_hour
    )
