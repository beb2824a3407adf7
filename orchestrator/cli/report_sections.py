"""The report's noise banner and A/B section (printed first), and its Nsight Compute table
(printed last)."""

from __future__ import annotations

from orchestrator.boundary import markup_safe


def noise_banner(noise) -> str | None:
    """The report's first line when the run's A/A control says the machine was too noisy
    for its verdicts (manifest.noise, benches.noise); None for a quiet run or none known."""
    if noise is None or noise.verdict != "noisy":
        return None
    return (
        "[bold red]noisy: verdicts not reliable[/] (the A/A control, judged once for the "
        f"whole run: {markup_safe(noise.reason, 400)})"
    )


def _interval(point: float | None, ci: tuple[float, float] | None) -> str:
    if point is None or ci is None:
        return "-"
    return f"{point:.4f}x [{ci[0]:.4f}, {ci[1]:.4f}]"


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


def show_comparison(out, ab) -> None:
    """Did the candidate get faster than the baseline: per config, then overall."""
    from rich.table import Table

    c = ab.comparison
    if c.source == "implementation":
        out.print(f"[bold]A/B[/]: {markup_safe(ab.candidate)} against {markup_safe(c.baseline)}")
    elif ab.user_sources:
        out.print(
            f"[bold]A/B[/]: {markup_safe(ab.candidate)} "
            f"({markup_safe(ab.user_sources.get(ab.candidate, '?'))}) against "
            f"{markup_safe(c.baseline)} ({_source(ab)})"
        )
    else:
        out.print(
            f"[bold]A/B[/]: {markup_safe(ab.candidate)} (sources {_hash(ab.candidate_build)}) "
            f"against {markup_safe(c.baseline)} ({_source(ab)}; sources "
            f"{_hash(ab.baseline_build)})"
        )
    table = Table(
        "config",
        f"{markup_safe(ab.candidate, 40)} ms",
        f"{markup_safe(c.baseline, 40)} ms",
        "speedup [95% CI]",
        "verdict",
        title="candidate over baseline",
    )
    for row in ab.rows:
        table.add_row(
            markup_safe(row.config),
            f"{row.candidate_ms:.4f}" if row.candidate_ms is not None else "-",
            f"{row.baseline_ms:.4f}",
            _interval(row.speedup, row.speedup_ci),
            markup_safe(row.verdict or "-"),
        )
    out.print(table)
    o = ab.overall
    if o is None:
        out.print("overall: no config has a verdict-worthy speedup")
        return
    out.print(
        f"[bold]overall[/]: {markup_safe(ab.candidate)} is "
        f"{_interval(o.geomean, (o.ci_low, o.ci_high))} against {markup_safe(c.baseline)}: "
        f"[bold]{o.verdict}[/] (geometric mean over {o.configs} configs, each config's "
        "placements resampled)"
    )


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def show_profile(out, rows) -> None:
    """Nsight Compute's counters side by side, implementations of a config together."""
    from rich.table import Table

    states = {(row.state, row.message) for row in rows}
    if len(states) == 1 and rows[0].state != "profiled":  # one reason for every row
        out.print(f"Nsight Compute: {rows[0].state}: {markup_safe(rows[0].message, 300)}")
        return
    table = Table(
        "config",
        "implementation",
        "state",
        "µs",
        "SM %",
        "tensor %",
        "DRAM %",
        "occupancy %",
        "regs",
        "smem KiB",
        "local B",
        "top stalls",
        "report",
        title="Nsight Compute (after the timing; durations under the profiler)",
    )
    for row in rows:
        profiled = row.state == "profiled"
        smem = row.shared_mem_per_block_bytes
        table.add_row(
            markup_safe(row.config),
            markup_safe(row.implementation),
            row.state,
            _number(row.duration_us),
            _number(row.sm_throughput_pct),
            _number(row.tensor_pipe_pct),
            _number(row.dram_throughput_pct),
            _number(row.achieved_occupancy_pct),
            _number(row.registers_per_thread, 0),
            _number(smem / 1024 if smem is not None else None),
            _number(row.local_memory_bytes, 0),
            markup_safe(row.top_stalls if profiled else row.message, 120),
            markup_safe(row.report or "-"),
        )
    out.print(table)
