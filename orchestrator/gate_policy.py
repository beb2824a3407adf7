"""The gate's defaults, in a module of their own: `bench --help` shows them without
importing pydantic or numpy (the service that applies them, service/gate.py, needs both).
Its margin is the run's own (the plan's `margin`: results_schema/verdicts.py)."""

# One pooled statistic: its false-alarm rate is one interval's (2.5% one-sided), where "any of
# 12 configs" would be about twelve times that. `any` catches a slowdown confined to a shape.
DEFAULT_GATE_ON = "geomean"


def noise_reasons(noise, margin: float, margin_text: str) -> list[str]:
    """Why the A/A control leaves the gate inconclusive, from the run's noise decision
    (manifest.noise, benches.noise): its simultaneous intervals re-judged at the gate's
    margin, so a control that strayed 3% stops a 2% gate but not a 25% one. Empty when the
    control vouches for the run. `noise` is a results_schema Noise or None."""
    if noise is None:
        return [
            "the run carries no A/A noise decision (manifest.noise; runs made before it "
            "have none), so the machine's noise is unknown"
        ]
    if not noise.vouches():
        return [f"the machine was too noisy to judge: {noise.reason}"]
    different = noise.different(margin)
    if not different:
        return []
    where = ", ".join(i.config or "their geometric mean" for i in different[:3])
    more = f" and {len(different) - 3} more" if len(different) > 3 else ""
    return [
        f"the A/A control judged two identical implementations different beyond the "
        f"{margin_text} margin on {len(different)} of its {len(noise.intervals)} "
        f"simultaneous intervals ({where}{more}): the machine was too noisy to judge"
    ]
