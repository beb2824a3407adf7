"""Where a sweep's rankings disagree: each GPU type ranked its candidates on its own machine
(docs/ranking.md), so only what each ranking decided is compared, never a number of one
machine with a number of another: which candidate is best (or which are tied), which pairs
one GPU's intervals put in one order and another GPU's in the other, and which candidates
one GPU ranked and another could not.

A pair is put in order only where the ranking's simultaneous intervals separate it: against
the leader, its `versus_leader` interval; else the two geometric-mean intervals over the
same baseline, disjoint (all hold together, so the one above is the faster).
"""

from __future__ import annotations

from itertools import combinations

from results_schema.program_output import RankingDisagreement
from results_schema.ranking import Ranking


def answer(gpu: str, ranking: Ranking) -> str:
    """What one GPU's ranking decided, in words: its best, or its tie."""
    if ranking.best is not None:
        return f"best on {gpu}: {ranking.best}"
    if ranking.tied:
        return f"tied on {gpu}: {', '.join(ranking.tied)}"
    return f"none ranked on {gpu}"


def shown_faster(ranking: Ranking, first: str, second: str) -> bool:
    """Whether the ranking's intervals show `first` faster than `second`."""
    ranked = {c.identity: c for c in ranking.candidates}
    a, b = ranked.get(first), ranked.get(second)
    if a is None or b is None:
        return False
    if a.rank == 1 and b.versus_leader is not None:
        return b.versus_leader.ci_low > 1
    if b.rank == 1 and a.versus_leader is not None:
        return a.versus_leader.ci_high < 1
    return a.geomean.ci_low > b.geomean.ci_high


def disagreements(rankings: list[tuple[str, Ranking]]) -> list[RankingDisagreement]:
    """Where the rankings of `(gpu, ranking)` disagree; empty when fewer than two."""
    if len(rankings) < 2:
        return []
    return [*_best(rankings), *_order(rankings), *_ranked(rankings), *_baseline(rankings)]


def _best(rankings: list[tuple[str, Ranking]]) -> list[RankingDisagreement]:
    decided = {(r.best, tuple(r.tied)) for _, r in rankings}
    if len(decided) < 2:
        return []
    return [
        RankingDisagreement(
            kind="best",
            gpus=[gpu for gpu, _ in rankings],
            candidates=list(dict.fromkeys(name for _, r in rankings for name in r.tied)),
            text="; ".join(answer(gpu, ranking) for gpu, ranking in rankings),
        )
    ]


def _order(rankings: list[tuple[str, Ranking]]) -> list[RankingDisagreement]:
    names = dict.fromkeys(c.identity for _, r in rankings for c in r.candidates)
    found = []
    for first, second in combinations(names, 2):
        ahead = [gpu for gpu, r in rankings if shown_faster(r, first, second)]
        behind = [gpu for gpu, r in rankings if shown_faster(r, second, first)]
        if ahead and behind:
            found.append(
                RankingDisagreement(
                    kind="order",
                    gpus=[*ahead, *behind],
                    candidates=[first, second],
                    text=f"{first} shown faster than {second} on {', '.join(ahead)}; "
                    f"{second} shown faster than {first} on {', '.join(behind)}",
                )
            )
    return found


def _ranked(rankings: list[tuple[str, Ranking]]) -> list[RankingDisagreement]:
    """A candidate one GPU ranked and another left out (its build or gate failed there)."""
    found = []
    ranked_on = {gpu: {c.identity for c in r.candidates} for gpu, r in rankings}
    reasons = {(gpu, u.identity): u.reason for gpu, r in rankings for u in r.unranked}
    names = dict.fromkeys(c.identity for _, r in rankings for c in r.candidates)
    names.update(dict.fromkeys(u.identity for _, r in rankings for u in r.unranked))
    for name in names:
        on = [gpu for gpu, _ in rankings if name in ranked_on[gpu]]
        off = [gpu for gpu, _ in rankings if name not in ranked_on[gpu]]
        if not on or not off:
            continue
        why = "; ".join(
            f"{gpu}: {reasons[(gpu, name)]}" if (gpu, name) in reasons else gpu for gpu in off
        )
        found.append(
            RankingDisagreement(
                kind="ranked",
                gpus=[*on, *off],
                candidates=[name],
                text=f"{name} ranked on {', '.join(on)}, not on {why}",
            )
        )
    return found


def _baseline(rankings: list[tuple[str, Ranking]]) -> list[RankingDisagreement]:
    baselines = {gpu: r.baseline for gpu, r in rankings}
    if len(set(baselines.values())) < 2:
        return []
    return [
        RankingDisagreement(
            kind="baseline",
            gpus=list(baselines),
            candidates=list(dict.fromkeys(baselines.values())),
            text="speedups over different baselines: "
            + "; ".join(f"{b} on {gpu}" for gpu, b in baselines.items()),
        )
    ]
