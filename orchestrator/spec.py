"""RunSpec: everything about one run that the backends, renderer and registry need."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from results_schema import Plan
from results_schema.names import (
    RUN_ID_PATTERN,
    instance_name,
    run_key,
)
from results_schema.names import new_run_id as new_run_id
from results_schema.record import billed_usd


def new_sweep_id(now: datetime | None = None) -> str:
    """sweep-YYYYMMDD-HHMMSS-xxxxxx: never a run id, so a command can tell them apart."""
    return f"sweep-{new_run_id(now)}"


def is_sweep_id(text: str) -> bool:
    return text.startswith("sweep-")


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(pattern=RUN_ID_PATTERN)
    backend: str
    plan: Plan
    owner: str
    budget_usd: float = Field(gt=0)
    rate_usd_per_hour: float = Field(ge=0, description="0 on the local backend")
    max_run_seconds: int = Field(gt=0, description="the hard time cap (cloud-enforced on gce)")
    estimated_seconds: int = Field(ge=0)
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tree_sha256s: dict[str, str] = Field(
        default_factory=dict,
        description="each tree of the payload by its digest (Payload.tree_sha256s): the "
        "startup script checks each just before it is used",
    )
    spot: bool = True
    sweep_id: str | None = Field(None, pattern=r"^sweep-\d{8}-\d{6}-[0-9a-f]{6}$")
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    cache_trusted: bool = Field(
        False,
        description="its cache candidates may be promoted into the shared cache at fetch",
    )

    @property
    def instance_name(self) -> str:
        return instance_name(self.run_id)

    @property
    def run_prefix(self) -> str:
        """Key prefix of this run inside the store (the store adds its own bucket prefix)."""
        return run_key(self.run_id)

    def with_payload(self, payload) -> RunSpec:
        """This spec carrying the payload's sha256 and its trees' digests."""
        return self.model_copy(
            update={"payload_sha256": payload.sha256, "tree_sha256s": payload.tree_sha256s}
        )

    def estimated_cost_usd(self) -> float:
        return billed_usd(self.rate_usd_per_hour, self.estimated_seconds)

    def record_fields(self) -> dict:
        """What the registry keeps of this spec: every RunRecord field a spec defines, in
        the registry's types (the plan by name, times as ISO text, no sweep as "")."""
        from dataclasses import fields

        from orchestrator.registry import RunRecord

        values = {
            name: getattr(self, name)
            for name in {f.name for f in fields(RunRecord)} & set(type(self).model_fields)
        }
        return {
            **values,
            "plan": self.plan.name,
            "created_at": self.created_at.isoformat(),
            "sweep_id": self.sweep_id or "",
        }
