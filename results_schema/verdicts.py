"""The verdict rule and the one margin: one home for the VM's summaries (benches.stats) and
its sampling (benches.sequential), and for the controller's gate, report, fetch summary and
status, which judge the same intervals again by this rule, at the run's margin.

A verdict reads the interval of the candidate's speedup over a row (> 1: the candidate is
faster) against the margin m:

    slower      the whole interval lies below 1 - m: shown slower beyond the margin
    faster      the whole interval lies above 1 + m
    equivalent  the whole interval lies inside [1 - m, 1 + m]
    not-slower  the lower bound is at or above 1 - m, the upper above 1 + m: shown not
                slower beyond the margin (non-inferior), not shown faster
    undecided   the lower bound lies below 1 - m and the upper at or above it: neither
                shown slower nor shown not slower; a narrower interval would decide it

A gate passes on what is shown not slower (faster, equivalent, not-slower: the lower bound
at or above 1 - m, the design of a non-inferiority test) and fails on slower; undecided is
neither. Before this rule a run said `indistinguishable` for both undecided and not-slower,
and a gate passed it: a run too noisy to see a 25% slowdown passed (issue 49). Runs made
then still carry the word; the controller judges their intervals again.

One margin, 2%, for every verdict of a run (the plan's `margin`, which `launch --margin`
sets): A/A controls on an H100 strayed up to 1.4% from 1 at their point estimates (graph
mode at S=128; 0.4% elsewhere; 2026-11-23), and the slowdowns worth catching (3-5%) lie
above 2%. Before, the run's verdicts used 1% and the gate 2%, and could disagree.
"""

from __future__ import annotations

DEFAULT_MARGIN = 0.02
VERDICTS = ("faster", "slower", "equivalent", "not-slower", "undecided")
# What runs made before the rule above wrote for undecided and not-slower alike.
LEGACY_VERDICT = "indistinguishable"
# The verdicts that call two implementations different (an A/A control's false alarm).
DIFFERENT = ("faster", "slower")
# Shown not slower beyond the margin: what a pass needs of every gated statistic.
NOT_SLOWER = ("faster", "equivalent", "not-slower")


def verdict(ci_low: float, ci_high: float, margin: float) -> str:
    """The interval [ci_low, ci_high] of a speedup judged against [1 - margin, 1 + margin]
    (the module's docstring says what each word means)."""
    if ci_high < 1.0 - margin:
        return "slower"
    if ci_low > 1.0 + margin:
        return "faster"
    if ci_low >= 1.0 - margin:
        return "equivalent" if ci_high <= 1.0 + margin else "not-slower"
    return "undecided"


def decided(word: str) -> bool:
    """Whether a verdict decides a gate: shown slower, or shown not slower."""
    return word == "slower" or word in NOT_SLOWER
