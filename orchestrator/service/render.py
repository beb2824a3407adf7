"""render: the scripts (and, on gce, the instance request) a launch would produce."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.payload import build_payload
from orchestrator.runtime_model import RuntimeEstimate
from orchestrator.service.context import Context
from orchestrator.service.launch import LaunchRequest, _render_for, plan_spec
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan


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
    `peers`) would run."""
    plan, _ = resolve_plan(plan_ref, backend_name, kernel=kernel)
    shaped = shape_plan(plan, PlanOptions(kernel=kernel, peers=peers))
    plan = shaped.plan
    request = LaunchRequest(budget_usd=budget_usd, plan=plan_ref)
    spec, _, estimate = plan_spec(ctx, request, backend_name, plan, spot=ctx.config.spot)
    payload = build_payload(plan, kernel_trees=shaped.kernel_trees)
    spec = spec.with_payload(payload)
    backend = ctx.backend(backend_name)
    startup, shutdown = _render_for(ctx, backend, spec, signed=False)
    instance_json = backend.instance_request_json(spec, startup, shutdown)
    return Rendered(startup, shutdown, instance_json, estimate, spec.rate_usd_per_hour)
