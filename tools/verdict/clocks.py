"""Clocks around a few functions of the harness's parent, by name: what
sample_breakdown.py and plan_breakdown.py print (issue 48, item 6). Imports `benches` from
wherever the caller's sys.path finds it.
"""

from __future__ import annotations

import collections
import functools
import time

from benches import bracket, cuda_ipc, isolation, row_checks, shared_buffers, timing

SPENT: dict[str, list[float]] = collections.defaultdict(list)


def clocked(owner, name: str, label: str | None = None, by_first_arg: bool = False) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            key = label or name
            if by_first_arg and len(args) > 1:
                key = f"{key}({args[1]})"
            SPENT[key].append(time.perf_counter() - start)

    setattr(owner, name, wrapper)


def wrap_all() -> None:
    clocked(isolation.MeasuredPlacement, "_take")
    clocked(isolation.MeasuredPlacement, "_picks")
    clocked(isolation.MeasuredPlacement, "_keep")
    clocked(isolation.MeasuredPlacement, "confirm")
    clocked(isolation.MeasuredPlacement, "_compare")
    clocked(isolation, "fill_fresh")
    clocked(shared_buffers, "fill_fresh", "fill_fresh(module)")
    clocked(isolation.Worker, "request", by_first_arg=True)
    clocked(isolation.Worker, "finished")
    clocked(isolation.Worker, "settle")
    clocked(bracket.CudaBracket, "sample", "bracket.sample")
    clocked(shared_buffers.GoCounter, "release", "go released (enqueued)")
    clocked(row_checks, "gatherer")
    clocked(row_checks, "query_rows")
    clocked(row_checks, "reference")
    clocked(row_checks, "problems")
    clocked(timing.CudaClock, "_sample", "in-process _sample")
    clocked(timing.CudaClock, "flush")
    # A block's start and end (most of the default plan's extra benchmark time on an H200
    # lies in gaps of 15 ms or more between rows: tools/verdict/README.md, session 8).
    clocked(isolation.MeasuredPlacement, "__init__", "placement made")
    clocked(isolation.MeasuredPlacement, "_ready", "placement ready (place reply)")
    clocked(isolation.MeasuredPlacement, "drop", "placement dropped")
    clocked(isolation.CalibrationSamples, "__call__", "calibration (a block's)")
    clocked(isolation.Worker, "free_later")
    clocked(shared_buffers.Lender, "lend_copies")
    clocked(cuda_ipc.Mappings, "_open", "ipc open (parent)")
    clocked(bracket.Calibration, "overhead_ms")
