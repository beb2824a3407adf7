"""The ranking of a run's candidates (ranking.json, carried by the manifest and gate.json):
each candidate's speedup over the baseline per config and on the geometric mean, with
simultaneous intervals, and which candidate is best, if one is shown to be.

benches/ranking.py makes it on the machine that measured; docs/ranking.md describes it for
programs. Versioned: a field's meaning never changes under one `schema_version`; a new field
with a default keeps the version, anything else takes a new one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

RANKING_SCHEMA_VERSION = "1"
# A run's candidates: the kernel and its variants (at most 16), yardsticks and peers beside.
MAX_RANKED = 64
MAX_RANKED_CONFIGS = 256  # a plan's configs (orchestrator/boundary/limits.py)
MAX_REASON_CHARS = 300
# Candidate × config intervals a ranking lists: 20 candidates × 256 configs would make the
# manifest that carries it about 1 MB, its bound (orchestrator/boundary/limits.py).
MAX_CONFIG_INTERVALS = 2048


class _Strict(BaseModel):
    # A VM's numbers are untrusted: NaN and infinity are refused everywhere.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RankedInterval(_Strict):
    """A ratio (> 1: the first named is faster) with its simultaneous interval."""

    speedup: float = Field(gt=0)
    ci_low: float = Field(gt=0)
    ci_high: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> RankedInterval:
        if not self.ci_low <= self.speedup <= self.ci_high:
            raise ValueError(
                f"interval [{self.ci_low:g}, {self.ci_high:g}] does not hold its point "
                f"{self.speedup:g}"
            )
        return self

    def excludes_one(self) -> bool:
        return self.ci_low > 1 or self.ci_high < 1


class ConfigSpeedup(RankedInterval):
    """A candidate's speedup over the baseline on one config."""

    config: str


class RankedCandidate(_Strict):
    """One candidate: its place, its speedups over the baseline, and how it stands against
    the leader (the candidate with the highest geometric-mean speedup)."""

    identity: str = Field(description="the candidate's identity, as summary.csv names it")
    rank: int = Field(ge=1, description="1: the highest geometric-mean speedup (the leader)")
    geomean: RankedInterval = Field(
        description="speedup over the baseline: the geometric mean over the ranking's configs"
    )
    configs: list[ConfigSpeedup] = Field(
        max_length=MAX_RANKED_CONFIGS,
        description="speedup over the baseline, per config (empty when the ranking's "
        "per_config is false)",
    )
    versus_leader: RankedInterval | None = Field(
        default=None,
        description="the leader's geometric-mean speedup over this candidate's (> 1: the "
        "leader is faster); None for the leader",
    )
    tied_with_leader: bool = Field(
        description="the leader is not shown faster than it (versus_leader's interval holds "
        "1); true for the leader"
    )


class Unranked(_Strict):
    """A candidate left out of the ranking, and why (no samples: its build or its gate
    failed; or a config it could not be compared on)."""

    identity: str
    reason: str = Field(max_length=MAX_REASON_CHARS)


class Ranking(_Strict):
    """ranking.json: the run's candidates ranked by their speedup over one baseline."""

    schema_version: Literal["1"] = RANKING_SCHEMA_VERSION
    baseline: str = Field(description="the identity every speedup is over")
    confidence: float = Field(
        gt=0, lt=1, description="family-wise: the chance every interval holds its true value"
    )
    family: int = Field(ge=1, description="how many intervals share that confidence")
    resamples: int = Field(ge=1)
    method: Literal["max-t-cluster-bootstrap"] = "max-t-cluster-bootstrap"
    description: str = Field(description="how the intervals were made, in words")
    configs: list[str] = Field(
        max_length=MAX_RANKED_CONFIGS,
        description="the configs ranked over: every candidate's geometric mean covers them all",
    )
    candidates: list[RankedCandidate] = Field(
        max_length=MAX_RANKED, description="the ranked candidates, highest speedup first"
    )
    best: str | None = Field(
        description="the leader when it is shown faster than the runner-up (or is the only "
        "candidate); None: a tie"
    )
    tied: list[str] = Field(
        max_length=MAX_RANKED,
        description="every candidate not shown slower than the leader, the leader first; "
        "[best] when there is a best",
    )
    unranked: list[Unranked] = Field(default_factory=list, max_length=MAX_RANKED)
    per_config: bool = Field(
        default=True,
        description=f"false: more than {MAX_CONFIG_INTERVALS} candidate × config intervals, "
        "left out to keep the manifest within its bound (they were still in the family)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Ranking:
        names = [c.identity for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("a candidate is ranked twice")
        if [c.rank for c in self.candidates] != list(range(1, len(names) + 1)):
            raise ValueError("ranks must run 1, 2, ... in the candidates' order")
        tied = [c.identity for c in self.candidates if c.tied_with_leader]
        if self.tied != tied:
            raise ValueError("tied must list the candidates tied with the leader, in order")
        if self.best is not None and (
            not names or self.tied != [names[0]] or self.best != names[0]
        ):
            raise ValueError("best must be the leader, and tied with nobody")
        if self.best is None and names and len(tied) < 2:
            raise ValueError("without a best, at least two candidates are tied")
        if any(c.versus_leader is None for c in self.candidates[1:]):
            raise ValueError("every candidate but the leader stands against it")
        if len(set(self.configs)) != len(self.configs):
            raise ValueError("a config is ranked over twice")
        listed = self.configs if self.per_config else []
        if any([s.config for s in c.configs] != listed for c in self.candidates):
            raise ValueError("every candidate lists the ranking's configs, in its order")
        return self

    def leads_report(self) -> bool:
        """Whether the report leads with it: more than one candidate was timed."""
        return len(self.candidates) + len(self.unranked) > 1
