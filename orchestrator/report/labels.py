"""An implementation's name as the report prints it: with the backend that actually ran;
and a verdict as a row of it reads."""

from __future__ import annotations

from collections.abc import Iterable

from results_schema.models import implementation_of


def implementation_label(implementation: str, backends: Iterable[str]) -> str:
    """An implementation with the backend that actually ran, e.g. "sdpa (cudnn)"; where
    configs ran different backends, each: "sdpa (cudnn/flash)"."""
    details = sorted({_backend_detail(implementation, b) for b in backends} - {""})
    return f"{implementation} ({'/'.join(details)})" if details else implementation


def _backend_detail(implementation: str, backend: str) -> str:
    """What the backend adds to the name: SDPA's chosen kernel, a contract kernel's tree
    (ours or a user's: its commit, '+dirty'), nothing for a pinned SDPA whose name says it;
    anything else (a run from before our kernel had a contract) as it was recorded."""
    family, _, detail = backend.partition(":")
    if not detail:
        return "" if backend == implementation else backend
    if family == "user":  # user:<declared name>@<commit 12>[+dirty] (benches/kernel_tree.py)
        return detail.rpartition("@")[2]
    if implementation_of(implementation) == f"{family}-{detail}":
        return ""
    return detail


# Whose a verdict is, where a row names another implementation: every speedup is the
# candidate's over the row (an A/A control's: its twin's over it), so "sdpa ... slower"
# alone would read as sdpa's. Summary, report and legend say it one way (issue 52).
CANDIDATE_SUBJECT = "cand."
TWIN_SUBJECT = "twin"


def verdict_phrase(verdict: str, *, control: bool = False) -> str:
    """'cand. faster', 'cand. slower', 'cand. not slower' ('twin ...' on the A/A control's
    row); equivalent and undecided as they are: they read right whoever the subject is."""
    subject = TWIN_SUBJECT if control else CANDIDATE_SUBJECT
    if verdict in ("faster", "slower"):
        return f"{subject} {verdict}"
    if verdict == "not-slower":
        return f"{subject} not slower"
    return verdict
