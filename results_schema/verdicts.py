"""The verdict rule, one home for the VM's summaries (benches.stats) and the controller's
gate (orchestrator.service.gate), which re-judges the same intervals at its own margin."""

from __future__ import annotations

# The verdicts that call two implementations different (an A/A control's false alarm).
DIFFERENT = ("faster", "slower")


def verdict(ci_low: float, ci_high: float, margin: float) -> str:
    """`faster` when the whole interval lies above 1+δ, `slower` below 1-δ, `equivalent`
    inside [1-δ, 1+δ], otherwise `indistinguishable` (it straddles an edge)."""
    if ci_low > 1.0 + margin:
        return "faster"
    if ci_high < 1.0 - margin:
        return "slower"
    if ci_low >= 1.0 - margin and ci_high <= 1.0 + margin:
        return "equivalent"
    return "indistinguishable"
