"""`bench report`'s results table, laid out for 80 columns and pipes.

A config is a heading row; its implementations are indented under it, each named with the
backend that actually ran. Numbers never wrap (a column of them is as wide as its widest
value) and are printed to significant digits, so they stay short; only names fold.
Verdicts and flags are abbreviated where they would widen the table; the legend says how.
"""

from __future__ import annotations

import math

from orchestrator.cli.grouped_table import Group, GroupedTable, Row
from orchestrator.report import Report, ReportRow, implementation_label
from orchestrator.report.labels import verdict_phrase
from orchestrator.text import markup_safe
from results_schema.gpu_kinds import NEAR_PEAK_PERCENT, near_peak
from results_schema.sampling import level

# Long words that would set the verdict column's width, and their short forms.
SHORT_VERDICTS = {
    "indistinguishable": "indist.",
    "equivalent": "equiv.",
    "wrong-timed-output": "wrong out",
}


def significant(value: float, digits: int) -> str:
    """`digits` significant digits without an exponent where that stays short: 0.0804,
    111.8, 13170; an exponent below 0.001 or from a million up."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if not 1e-3 <= magnitude < 1e6:
        return f"{value:.{digits - 1}e}"
    # The magnitude after rounding: 0.9996 at 3 digits is 1.00, not 1.000.
    rounded = float(f"{magnitude:.{digits - 1}e}")
    decimals = max(digits - 1 - math.floor(math.log10(rounded)), 0)
    return f"{value:.{decimals}f}"


# Two short lines keep the figure columns narrow, and the names their line.
_FIGURE_HEADERS = ("median\nms", "TFLOP/s", "%peak", "speedup", "{level} CI", "verdict")
CANDIDATE_MARK = "cand."
CANDIDATE_LEGEND = f"{CANDIDATE_MARK}: the candidate, the row the others are compared with"
NEAR_PEAK_MARK = "!"
NEAR_PEAK_LEGEND = (
    f"{NEAR_PEAK_MARK} after % of peak: past {NEAR_PEAK_PERCENT:g} % of the GPU's dense "
    "16-bit peak (results_schema/gpu_kinds.json): check it twice before believing it: the "
    "row's correctness checks, the run's clocks (environment.json) and a --profile of it"
)
RATIO_OF_MEDIANS = "ratio of medians"
VERDICTS = frozenset(
    {"faster", "slower", "equivalent", "not-slower", "undecided", "indistinguishable"}
)
# What each verdict and flag says (results_schema/verdicts.py, benches/stats.py).
MEANINGS = {
    "faster": "all of it above 1+δ",
    "slower": "all of it below 1-δ",
    "equivalent": "all of it inside",
    "not-slower": "its low end at or above 1-δ (shown not slower)",
    "undecided": "its low end below 1-δ, its high end not",
    "indistinguishable": "across 1-δ or 1+δ (a run from before not-slower and undecided)",
    "impossible": "faster than the GPU's peak allows: no verdict; to fix: check that the "
    "kernel computes every output (its correctness rows), or its GPU kind's peak in "
    "results_schema/gpu_kinds.json",
    "wrong-timed-output": "an output taken in the timed loop was wrong: no verdict; to fix: "
    "the kernel, whose outputs differ from the reference's while it is timed",
    "quantised": "few distinct timings (calls near the timer's resolution): no verdict; "
    "to fix: larger shapes, or a GPU run",
    "bimodal": "timings in two groups apart (e.g. the scheduler's time slices on a busy "
    "machine): no verdict; to fix: a quieter machine, more samples (--samples N), or a GPU run",
}


def results_table(report: Report) -> GroupedTable:
    """A heading line per config, then its implementations, each named with the backend
    that ran; under a row whose ratio of medians differs from its speedup, that ratio."""
    modes = {row.mode for row in report.rows}
    several_modes = len(modes) > 1
    figures = [h.format(level=level(report.confidence)) for h in _FIGURE_HEADERS]
    headers = ["mode", *figures] if several_modes else figures
    groups = []
    for config, rows in _by_config(report.rows).items():
        group = Group(markup_safe(config))
        for row in rows:
            mode = [markup_safe(row.mode)] if several_modes else []
            figures = _figures(row, report.candidate, control=row.implementation == report.control)
            group.rows.append(Row(_name(row, report.candidate), mode + figures))
            if shows_ratio_of_medians(row.speedup, row.ratio_of_medians):
                cells = [""] * len(headers)
                cells[headers.index("speedup")] = f"{significant(row.ratio_of_medians, 3)}x"
                group.rows.append(Row(f"  [dim]{RATIO_OF_MEDIANS}[/]", cells))
        groups.append(group)
    title = _title(report, next(iter(modes)) if not several_modes else None)
    return GroupedTable(
        "implementation (backend)", headers, groups, title, left=frozenset({"mode", "verdict"})
    )


def shows_ratio_of_medians(speedup: float | None, ratio: float | None) -> bool:
    """Whether the ratio of the medians differs from the speedup by more than rounding:
    printed to the same digits, they read differently."""
    if speedup is None or ratio is None:
        return False
    return significant(speedup, 3) != significant(ratio, 3)


def _title(report: Report, mode: str | None) -> str:
    title = f"run {markup_safe(report.run_id)} ({markup_safe(report.status)})"
    if report.candidate:
        title += f"; candidate {markup_safe(report.candidate)}"
        if report.candidate_source:
            title += f" ({markup_safe(report.candidate_source)})"
    if mode:
        title += f"; timing: {markup_safe(mode)}"
    return title


def legend(report: Report) -> list[str]:
    """What the speedup column and every word in the verdict column mean, below the table
    (plain text: the caller escapes it)."""
    lines = []
    if any(row.speedup is not None for row in report.rows):
        lines.append(
            "speedup: how many times as fast the candidate (cand.) ran as the row's "
            "implementation (on the A/A control's row: its twin, as the control), the median "
            "of the paired per-round ratios row ms / "
            f"candidate ms; > 1: cand. faster. {RATIO_OF_MEDIANS}: the row's median over the "
            "candidate's, shown where it differs"
        )
    if _marks_candidate(report):
        lines.append(CANDIDATE_LEGEND)
    if any(near_peak(row.pct_of_peak) for row in report.rows):
        lines.append(NEAR_PEAK_LEGEND)
    words = [row.verdict or row.flag for row in report.rows if row.verdict or row.flag]
    return lines + verdict_legend(words, report.margin, report.confidence)


def verdict_legend(words, margin: float | None, confidence: float | None = None) -> list[str]:
    """The verdicts among `words` on one line, the flags on another, in MEANINGS's order:
    each word (after its short form, where it has one) and what it says. Both are the
    schema's words (results_schema.models: Verdict, Flag), so MEANINGS has every one."""
    used = set(words)

    def said(kinds) -> str:
        shown = [word for word in MEANINGS if word in kinds and word in used]
        return "; ".join(
            f"{_short_form(word)}{verdict_phrase(word)}: {MEANINGS[word]}" for word in shown
        )

    delta = f"δ = {margin:g}" if margin is not None else "δ the run's margin"
    lines = []
    if used & VERDICTS:
        lines.append(
            f"verdicts of the {level(confidence)} interval against [1-δ, 1+δ], {delta}: "
            f"{said(VERDICTS)}"
        )
    if used - VERDICTS:
        lines.append(f"flags: {said(used - VERDICTS)}")
    return lines


# A speedup shown but not judged: the row it is over was flagged.
NO_VERDICT = (
    "no verdict: the candidate's own timings of that config were flagged (its row says "
    "which), so the speedups there are shown but not judged; to fix: as that flag says"
)


def flag_legend(flags, no_verdict: bool) -> list[str]:
    """fetch's summary: what the flags it shows mean and what to do about them, and what
    its 'no verdict' means (plain text: the caller escapes it)."""
    lines = verdict_legend([flag for flag in flags if flag not in VERDICTS], None)
    if no_verdict:
        lines.append(NO_VERDICT)
    return lines


def _short_form(word: str) -> str:
    short = SHORT_VERDICTS.get(word)
    return f"{short} = " if short else ""


def _marks_candidate(report: Report) -> bool:
    return any(_is_candidate(row, report.candidate) for row in report.rows)


def _is_candidate(row: ReportRow, candidate: str | None) -> bool:
    """The row the speedups are over: the plan's candidate (without a plan, any row with
    no speedup that is not flagged)."""
    if row.speedup is not None:
        return False
    return row.implementation == candidate or (candidate is None and not row.flag)


def _by_config(rows: list[ReportRow]) -> dict[str, list[ReportRow]]:
    grouped: dict[str, list[ReportRow]] = {}
    for row in rows:
        grouped.setdefault(row.config, []).append(row)
    return grouped


def _name(row: ReportRow, candidate: str | None) -> str:
    name = markup_safe(implementation_label(row.implementation, [row.backend]))
    if row.versus and row.versus != candidate:
        name += f" vs {markup_safe(row.versus)}"
    return name


def _figures(row: ReportRow, candidate: str | None, control: bool = False) -> list[str]:
    peak = significant(row.pct_of_peak, 3) if row.pct_of_peak is not None else "-"
    if near_peak(row.pct_of_peak):
        peak += NEAR_PEAK_MARK
    speedup = ci = "-"
    if row.speedup is not None:
        speedup = f"{significant(row.speedup, 3)}x"
    elif _is_candidate(row, candidate):
        speedup = CANDIDATE_MARK
    if row.speedup_ci is not None:
        low, high = row.speedup_ci
        ci = f"{significant(low, 3)}–{significant(high, 3)}"  # an en dash: "1e-05" has a hyphen
    verdict = row.flag or ""
    if row.verdict:
        verdict = verdict_phrase(SHORT_VERDICTS.get(row.verdict, row.verdict), control=control)
    return [
        significant(row.median_ms, 4),
        significant(row.tflops, 3),
        peak,
        speedup,
        ci,
        markup_safe(SHORT_VERDICTS.get(verdict, verdict)),
    ]
