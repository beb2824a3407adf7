"""The report's ranking of a run's candidates (ranking.json, benches/ranking.py): what a
run of several candidates leads with. One place for its words: the text report and the
gate's markdown say the same thing."""

from __future__ import annotations

from orchestrator.cli.grouped_table import Group, GroupedTable, Row
from orchestrator.cli.report_table import significant
from orchestrator.text import markup_safe
from results_schema.ranking import RankedInterval, Ranking
from results_schema.sampling import level


def interval_text(found: RankedInterval) -> str:
    return (
        f"{significant(found.speedup, 3)}x "
        f"[{significant(found.ci_low, 3)}, {significant(found.ci_high, 3)}]"
    )


def headline(ranking: Ranking) -> str:
    """The ranking's answer in one line, plain text (the caller escapes it): the best, or
    the tie, with the interval that decides it."""
    ranked = ranking.candidates
    if not ranked:
        return "no candidate could be ranked"
    leader = ranked[0]
    if len(ranked) == 1:
        return f"best: {leader.identity}, the only candidate ranked"
    runner_up = ranked[1]
    if ranking.best is not None:
        return (
            f"best: {leader.identity}, shown faster than the runner-up {runner_up.identity} "
            f"({interval_text(runner_up.versus_leader)})"
        )
    closest = ranked[len(ranking.tied) - 1]
    return (
        f"tied: {', '.join(ranking.tied)}: the leader {leader.identity} is not shown "
        f"faster than {closest.identity} ({interval_text(closest.versus_leader)}), so no "
        "best is named"
    )


def method_line(ranking: Ranking) -> str:
    return (
        f"speedup over {ranking.baseline}, geometric mean over {len(ranking.configs)} "
        f"configs; {level(ranking.confidence)} simultaneous intervals (all "
        f"{ranking.family} hold together: docs/ranking.md)"
    )


def show_ranking(out, ranking: Ranking) -> None:
    """The headline, a row per candidate (fastest first), the left-out ones and why."""
    out.print(f"[bold]Ranking[/]: {markup_safe(headline(ranking), 400)}", soft_wrap=False)
    out.print(ranking_table(ranking))
    for left_out in ranking.unranked:
        out.print(
            f"not ranked: {markup_safe(left_out.identity)}: {markup_safe(left_out.reason, 300)}",
            soft_wrap=False,
        )
    out.print(markup_safe(method_line(ranking)), soft_wrap=False)


def ranking_table(ranking: Ranking) -> GroupedTable:
    ci = f"{level(ranking.confidence)} CI"
    headers = ["#", "speedup", ci, "leader\nover it", f"its {ci}"]
    rows = []
    for c in ranking.candidates:
        versus = c.versus_leader
        cells = [
            str(c.rank),
            f"{significant(c.geomean.speedup, 3)}x",
            f"{significant(c.geomean.ci_low, 3)}–{significant(c.geomean.ci_high, 3)}",
            f"{significant(versus.speedup, 3)}x" if versus else "-",
            f"{significant(versus.ci_low, 3)}–{significant(versus.ci_high, 3)}" if versus else "-",
        ]
        tie = " (tied)" if c.tied_with_leader and len(ranking.tied) > 1 else ""
        rows.append(Row(markup_safe(c.identity) + tie, cells))
    return GroupedTable("candidate", headers, [Group(None, rows)])
