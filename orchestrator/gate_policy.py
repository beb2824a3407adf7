"""The gate's defaults, in a module of their own: `bench --help` shows them without
importing pydantic or numpy (the service that applies them, service/gate.py, needs both)."""

# Twice the plan's equivalence margin δ (1%): A/A controls on an H100 strayed up to 1.4% from
# 1 at their point estimates, and the slowdowns worth catching (3-5%) must stay above it.
DEFAULT_MARGIN = 0.02
# One pooled statistic: its false-alarm rate is one interval's (2.5% one-sided), where "any of
# 12 configs" would be about twelve times that. `any` catches a slowdown confined to a shape.
DEFAULT_GATE_ON = "geomean"
