"""Where a sweep's GPU types rank their candidates differently (issue 54, item 5): only
what each GPU's ranking decided is compared, never one machine's numbers with another's."""

from __future__ import annotations

from orchestrator.report.sweep_rankings import disagreements, shown_faster
from results_schema.ranking import Ranking


def interval(point: float, half: float) -> dict:
    return {"speedup": point, "ci_low": point / half, "ci_high": point * half}


def ranking(order: list[tuple[str, float]], half: float, unranked=(), baseline="base") -> Ranking:
    """Candidates fastest first, each (identity, geometric-mean speedup over `baseline`);
    every interval `half` wide (a factor each side), so the ties follow from the points."""
    leader = order[0][1]
    candidates = []
    for rank, (name, speedup) in enumerate(order, 1):
        versus = None if rank == 1 else interval(leader / speedup, half)
        candidates.append(
            {
                "identity": name,
                "rank": rank,
                "geomean": interval(speedup, half),
                "configs": [],
                "versus_leader": versus,
                "tied_with_leader": versus is None or versus["ci_low"] <= 1,
            }
        )
    tied = [c["identity"] for c in candidates if c["tied_with_leader"]]
    return Ranking.model_validate(
        {
            "baseline": baseline,
            "confidence": 0.95,
            "family": 3,
            "resamples": 2000,
            "description": "synthetic",
            "configs": [],
            "per_config": False,
            "candidates": candidates,
            "best": tied[0] if len(tied) == 1 else None,
            "tied": tied,
            "unranked": [{"identity": n, "reason": r} for n, r in unranked],
        }
    )


def kinds(found) -> list[str]:
    return [d.kind for d in found]


def test_a_different_best_and_a_pair_in_the_other_order_are_named():
    l4 = ranking([("b64", 2.0), ("b128", 1.5)], 1.05)
    h100 = ranking([("b128", 3.0), ("b64", 2.0)], 1.05)
    found = disagreements([("l4", l4), ("h100", h100)])
    assert kinds(found) == ["best", "order"]
    assert found[0].text == "best on l4: b64; best on h100: b128"
    assert found[1].text == ("b64 shown faster than b128 on l4; b128 shown faster than b64 on h100")
    assert found[1].gpus == ["l4", "h100"] and found[1].candidates == ["b64", "b128"]


def test_a_tie_on_one_gpu_and_a_best_on_the_other():
    l4 = ranking([("b64", 2.0), ("b128", 1.9)], 1.1)  # 2.0 / 1.9 within 1.1: tied
    h100 = ranking([("b64", 3.0), ("b128", 2.0)], 1.1)
    found = disagreements([("l4", l4), ("h100", h100)])
    assert l4.best is None and h100.best == "b64"
    assert kinds(found) == ["best"]  # the same order where both decided it
    assert found[0].text == "tied on l4: b64, b128; best on h100: b64"


def test_a_different_order_among_the_runners_up_needs_separated_intervals():
    # The same best; b32 and b128 swap places behind it. On l4 their intervals separate
    # them, on h100 too: an order disagreement. Where they overlap, none.
    l4 = ranking([("b64", 4.0), ("b32", 3.0), ("b128", 2.0)], 1.05)
    h100 = ranking([("b64", 4.0), ("b128", 3.0), ("b32", 2.0)], 1.05)
    close = ranking([("b64", 4.0), ("b128", 2.1), ("b32", 2.0)], 1.05)
    assert shown_faster(l4, "b32", "b128") and not shown_faster(close, "b128", "b32")
    found = disagreements([("l4", l4), ("h100", h100)])
    assert kinds(found) == ["order"] and found[0].candidates == ["b32", "b128"]
    assert disagreements([("l4", l4), ("h100", close)]) == []


def test_agreeing_rankings_and_a_single_gpu_have_no_disagreement():
    l4 = ranking([("b64", 2.0), ("b128", 1.5)], 1.05)
    h100 = ranking([("b64", 9.0), ("b128", 4.0)], 1.05)  # other numbers, the same decisions
    assert disagreements([("l4", l4), ("h100", h100)]) == []
    assert disagreements([("l4", l4)]) == []


def test_a_candidate_ranked_on_one_gpu_only_says_why_not_on_the_other():
    l4 = ranking([("b64", 2.0)], 1.05, unranked=[("b128", "no samples: its build failed")])
    h100 = ranking([("b64", 2.0), ("b128", 1.5)], 1.05)
    found = disagreements([("l4", l4), ("h100", h100)])
    assert kinds(found) == ["ranked"]
    assert found[0].text == "b128 ranked on h100, not on l4: no samples: its build failed"


def test_rankings_over_different_baselines_say_so():
    l4 = ranking([("b64", 2.0), ("b128", 1.5)], 1.05, baseline="sdpa")
    h100 = ranking([("b64", 2.0), ("b128", 1.5)], 1.05, baseline="flash")
    found = disagreements([("l4", l4), ("h100", h100)])
    assert kinds(found) == ["baseline"]
    assert found[0].text == "speedups over different baselines: sdpa on l4; flash on h100"
