"""The report's noise banner and A/B section (printed first), and its Nsight Compute table
(printed last)."""

from __future__ import annotations

from orchestrator.cli.grouped_table import Group, GroupedTable, Row
from orchestrator.cli.report_table import (
    RATIO_OF_MEDIANS,
    SHORT_VERDICTS,
    shows_ratio_of_medians,
    significant,
    verdict_legend,
)
from orchestrator.text import markup_safe
from results_schema.sampling import level


def noise_banner(noise, margin: float | None = None) -> str | None:
    """The first line of a report or a summary when the run's A/A control says the machine
    was too noisy for its verdicts (manifest.noise, benches.noise; at `margin`, else as the
    run decided); None for a quiet run or none known."""
    if noise is None:
        return None
    if not (noise.noisy_at(margin) if margin is not None else noise.verdict == "noisy"):
        return None
    return (
        "[bold red]noisy: verdicts not reliable[/] (the A/A control, judged once for the "
        f"whole run: {markup_safe(noise.reason, 400)}); {NOISY_REMEDY}"
    )


# What to do about a noisy run: every place that says "noisy" says this (issue 52).
NOISY_REMEDY = "to fix: more samples (--samples N), larger shapes, a quieter machine, or a GPU run"


def _interval(point: float | None, ci: tuple[float, float] | None) -> str:
    if point is None or ci is None:
        return "-"
    return f"{significant(point, 3)}x [{significant(ci[0], 3)}, {significant(ci[1], 3)}]"


def _source(ab) -> str:
    c = ab.comparison
    if c.source == "git":
        dirty = " (candidate: a working tree with uncommitted changes)" if c.candidate_dirty else ""
        return f"git {markup_safe(c.ref, 80)} = commit {markup_safe(c.commit)}{dirty}"
    if c.source == "tree":
        return f"tree {markup_safe(c.ref, 200)}"
    return "registry implementation"


def _hash(build) -> str:
    return markup_safe(build.source_sha256[:16]) if build else "?"


def show_comparison(out, ab, margin: float | None = None, confidence=None) -> None:
    """Did the candidate get faster than the baseline: per config, then overall; `margin`
    is the δ the verdicts used, `confidence` the intervals'."""
    c = ab.comparison
    if c.source == "implementation":
        out.print(f"[bold]A/B[/]: {markup_safe(ab.candidate)} against {markup_safe(c.baseline)}")
    elif ab.user_sources:
        out.print(
            f"[bold]A/B[/]: {markup_safe(ab.candidate)} "
            f"({markup_safe(ab.user_sources.get(ab.candidate, '?'))}) against "
            f"{markup_safe(c.baseline)} ({_source(ab)})",
            soft_wrap=False,
        )
    else:
        out.print(
            f"[bold]A/B[/]: {markup_safe(ab.candidate)} (sources {_hash(ab.candidate_build)}) "
            f"against {markup_safe(c.baseline)} ({_source(ab)}; sources "
            f"{_hash(ab.baseline_build)})",
            soft_wrap=False,
        )
    out.print(ab_table(ab, confidence))
    verdicts = [row.verdict for row in ab.rows if row.verdict]
    o = ab.overall
    words = verdicts + ([o.verdict] if o else [])
    for line in [_ab_legend(ab), *verdict_legend(words, margin, confidence)]:
        out.print(markup_safe(line), soft_wrap=False)
    if o is None:
        out.print("overall: no config has a verdict-worthy speedup")
        return
    out.print(
        f"[bold]overall[/]: {markup_safe(ab.candidate)} is "
        f"{_interval(o.geomean, (o.ci_low, o.ci_high))} against {markup_safe(c.baseline)}: "
        f"[bold]{o.verdict}[/] (geometric mean over {o.configs} configs of their speedups, "
        "resampled within each config by placement: a set of fresh buffers holding a share of "
        "its samples)",
        soft_wrap=False,
    )


def ab_table(ab, confidence: float | None = None) -> GroupedTable:
    """A row per config: the two medians, the speedup with its interval and verdict;
    under it, the ratio of the medians where it differs from the speedup."""
    headers = ["candidate", "baseline", "speedup", f"{level(confidence)} CI", "verdict"]
    rows = []
    for row in ab.rows:
        ci = "-"
        if row.speedup_ci is not None:
            ci = f"{significant(row.speedup_ci[0], 3)}–{significant(row.speedup_ci[1], 3)}"
        verdict = row.verdict or "-"
        cells = [
            significant(row.candidate_ms, 4) if row.candidate_ms is not None else "-",
            significant(row.baseline_ms, 4),
            f"{significant(row.speedup, 3)}x" if row.speedup is not None else "-",
            ci,
            markup_safe(SHORT_VERDICTS.get(verdict, verdict)),
        ]
        rows.append(Row(markup_safe(row.config), cells))
        if shows_ratio_of_medians(row.speedup, row.ratio_of_medians):
            ratio = f"{significant(row.ratio_of_medians, 3)}x"
            rows.append(Row(f"  [dim]{RATIO_OF_MEDIANS}[/]", ["", "", ratio, "", ""]))
    title = (
        f"candidate {markup_safe(ab.candidate)} over baseline {markup_safe(ab.comparison.baseline)}"
        " (median ms)"
    )
    return GroupedTable("config", headers, [Group(None, rows)], title, left=frozenset({"verdict"}))


def _ab_legend(ab) -> str:
    return (
        "speedup: the candidate's over the baseline, the median of the paired per-round "
        "ratios baseline ms / candidate ms; > 1: the candidate is faster. "
        f"{RATIO_OF_MEDIANS}: the baseline's median over the candidate's, shown where it "
        "differs"
    )


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# Short headers keep the columns narrow; PROFILE_LEGEND says what each holds.
PROFILE_HEADERS = ["µs", "SM", "tensor", "DRAM", "occup.", "regs", "smem", "local"]
PROFILE_LEGEND = (
    "µs: every kernel of the call, under the profiler; SM, tensor, DRAM: throughput, % of "
    "peak; occup.: achieved occupancy, %; regs: registers per thread; smem: shared memory "
    "per block, KiB; local: local-memory (spill) traffic, bytes (all but µs: the call's "
    "longest kernel); top stalls: why warps waited: cycles per issued instruction"
)


def show_profile(out, rows) -> None:
    """Nsight Compute's counters side by side, implementations of a config together."""
    states = {(row.state, row.message) for row in rows}
    if len(states) == 1 and rows[0].state != "profiled":  # one reason for every row
        out.print(
            f"Nsight Compute: {rows[0].state}: {markup_safe(rows[0].message, 300)}",
            soft_wrap=False,
        )
        return
    out.print(profile_table(rows))
    out.print(PROFILE_LEGEND, soft_wrap=False)


def profile_table(rows) -> GroupedTable:
    """A heading per config, a row of counters per implementation; below them, each
    implementation's top stalls and report file, or why it has no counters."""
    groups: dict[str, Group] = {}
    for row in rows:
        group = groups.setdefault(row.config, Group(markup_safe(row.config)))
        smem = row.shared_mem_per_block_bytes
        group.rows.append(
            Row(
                markup_safe(row.implementation),
                [
                    _number(row.duration_us),
                    _number(row.sm_throughput_pct),
                    _number(row.tensor_pipe_pct),
                    _number(row.dram_throughput_pct),
                    _number(row.achieved_occupancy_pct),
                    _number(row.registers_per_thread, 0),
                    _number(smem / 1024 if smem is not None else None),
                    _number(row.local_memory_bytes, 0),
                ],
            )
        )
        group.notes.append(_profile_note(row))
    title = "Nsight Compute (after the timing; durations under the profiler)"
    return GroupedTable("implementation", PROFILE_HEADERS, list(groups.values()), title)


def _profile_note(row) -> str:
    name = markup_safe(row.implementation)
    if row.state != "profiled":
        return f"{name}: {markup_safe(row.state)}: {markup_safe(row.message or '-', 300)}"
    # 'reason:cycles;…' with spaces, where a line can wrap
    stalls = ", ".join(part for part in row.top_stalls.split(";") if part)
    said = f"top stalls {markup_safe(stalls, 200)}" if stalls else ""
    report = f"report {markup_safe(row.report)}" if row.report else ""
    parts = (_measured_work(row), said, report)
    return f"{name}: {'; '.join(p for p in parts if p) or 'profiled'}"


def _measured_work(row) -> str:
    """What Nsight Compute counted beside the formulas: tensor TFLOP, DRAM MB, SM clock."""
    parts = []
    if row.tensor_flops is not None:
        formula = f" (formula {row.formula_flops / 1e12:.3g})" if row.formula_flops else ""
        parts.append(f"tensor {row.tensor_flops / 1e12:.3g} TFLOP{formula}")
    if row.dram_bytes is not None:
        least = f" (least {row.formula_dram_bytes / 1e6:.3g})" if row.formula_dram_bytes else ""
        parts.append(f"DRAM {row.dram_bytes / 1e6:.3g} MB{least}")
    if row.sm_clock_mhz is not None:
        parts.append(f"SM {row.sm_clock_mhz:.0f} MHz")
    return ", ".join(parts)
