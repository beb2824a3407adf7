"""What a worker sample's row check costs the parent's host: eagerly, a check a sample (as
isolation.MeasuredPlacement checked before issue 48's session 14), replayed from a CUDA graph
captured once per placement, and batched (row_checks.Unchecked, as the harness checks now: the
rows' queries gathered each sample, their reference and figures once the batch is full; its
cost a sample is the batches' total over the samples). Issue 48 item 6: the check was 1.23 ms
of a worker sample's 4.55 ms on an H200, most of it small launches. A developer probe for the
device machine: prints, per config, the median host time of one sample's check each way
(batched: the mean), and whether eager and graph gave the same figures.

    PYTHONPATH=/tmp/site:$PWD python3 tools/verdict/check_graph_probe.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches import row_checks  # noqa: E402

SHAPES = [  # (batch, heads, kv heads, seq_len, head_dim, causal): default-plan configs
    (4, 16, 16, 2048, 128, False),
    (2, 16, 16, 4096, 64, True),
    (1, 16, 16, 8192, 128, True),
    (2, 32, 8, 4096, 128, True),
]
ITERATIONS = 300
TOLERANCE = 1e-2


def probe(shape6, rng, device) -> tuple[float, float, float, bool]:
    """(eager ms, graph ms, batched ms, eager and graph's figures the same every time) of
    one shape's checks."""
    b, h, hkv, s, d, causal = shape6
    q = torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(b, hkv, s, d, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
    shape = tuple(q.shape)

    def reference(rows):
        return row_checks.reference(row_checks.query_rows(q[None], rows), k, v, rows, causal, h)

    def eager(rows):
        gathered = row_checks.gatherer([out], rows)()
        return row_checks.problems(gathered, reference(rows), TOLERANCE)

    # The graph's rows: static index buffers, refilled each check.
    static = row_checks.pick(shape, rng, device)
    gathered = torch.empty(len(static.batch), d, device=device, dtype=out.dtype)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm the kernels before the capture
            reference(static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        figures = row_checks._figures(gathered, reference(static), 1)

    def replayed(rows):
        static.batch.copy_(rows.batch, non_blocking=True)
        static.head.copy_(rows.head, non_blocking=True)
        static.position.copy_(rows.position, non_blocking=True)
        gathered.copy_(row_checks.gatherer([out], static)()[0])
        graph.replay()
        ((nonfinite, error),) = figures.tolist()
        return [row_checks._verdict(int(nonfinite), error, TOLERANCE)]

    unchecked = row_checks.Unchecked(s * d)

    def batched(rows):
        gathered = row_checks.gatherer([out], rows)()
        unchecked.add(0, (0,), rows, row_checks.query_rows(q[None], rows), gathered)
        if unchecked.full:
            return unchecked.verdicts(k, v, causal, h, TOLERANCE)
        return []

    times = {"eager": [], "graph": [], "batched": []}
    same = True
    for _ in range(ITERATIONS):
        rows = row_checks.pick(shape, rng, device)
        results = {}
        for name, check in (("eager", eager), ("graph", replayed), ("batched", batched)):
            torch.cuda.synchronize()
            start = time.perf_counter()
            results[name] = check(rows)
            times[name].append((time.perf_counter() - start) * 1e3)
        first, second = results["eager"][0][1], results["graph"][0][1]
        same &= abs(first - second) <= 1e-12 * max(1.0, abs(first))
    batched_ms = statistics.fmean(times["batched"])
    return statistics.median(times["eager"]), statistics.median(times["graph"]), batched_ms, same


def main() -> None:
    device = torch.device("cuda")
    rng = np.random.default_rng(20261129)
    print(f"{'shape':<28} {'eager ms':>9} {'graph ms':>9} {'batched ms':>10}  same")
    for shape6 in SHAPES:
        eager_ms, graph_ms, batched_ms, same = probe(shape6, rng, device)
        b, h, hkv, s, d, causal = shape6
        label = f"{b}x{h}/{hkv}x{s}x{d}{' causal' if causal else ''}"
        print(f"{label:<28} {eager_ms:9.3f} {graph_ms:9.3f} {batched_ms:10.3f}  {same}")


if __name__ == "__main__":
    main()
