"""Where does a GPU worker's own time differ from the same call timed in the harness's
process? (Issue 49 item 4: SDPA read 0.5-1.1 % longer through its worker at 0.22 ms, never
shorter, H200. Issue 48 item 6: cuda-extension's naive kernel read 1.059x through its worker
at fp16 2x16x4096x64 causal, sessions 8 and 15: an L2 left full of the parent's flush's lines,
found with the ways below, session 16; tools/verdict/README.md.) A developer tool for the
device machine, run by own_time_probe_device.sh.

One child process, the parent's q, k, v lent to it as benches/shared_buffers.py lends them
(driver allocations, benches/cuda_ipc.DeviceBuffer, opened by handle) and copies of its own
made from them. Each round times, in a shuffled order, the same call six ways, each as
benches/timing.CudaClock does (a spin, the L2 flushed, then events around the call alone):

  parent        in the parent's own process, on its torch allocations (the harness's `sdpa`)
  parent-lent   in the parent, on the driver allocations it lends
  solo-lent     in the child alone, on the lent buffers
  solo-own      in the child alone, on its own copies
  linked-lent   the child's call enqueued behind a wait on the parent's go counter, which
                the parent's stream writes after its flush: the worker's path (bracket.py)
  linked-own    the same, on the child's own copies

PROBE_WAYS picks others besides (names separated by spaces), to find what a linked call pays:
  linked-spin-own  linked-own, with a spin of the child's own (PROBE_SPIN_US, default 20)
                   between the wait and the start event: the call then follows a kernel of
                   its own context
  linked-flushed-own  linked-own, the child flushing the L2 with a buffer of its own after
                   the wait: what benches/worker.py does now
  linked-shared-flush-own  linked-own, the parent's flush on a driver allocation of its own
                   that the child has opened too
  linked-after-own linked-own, asked for only once the parent's flush and go are done: the
                   child's stream never waits while the parent's works
  self-own         the child's stream waits on a counter of its own, which a side stream of
                   its own writes after a spin: a gate inside one context, nothing of the
                   parent's between
  linked-side-own  linked-own, the wait on the go in a side stream of the child's, which the
                   call's stream follows by an event of its own
  ipc-self-own     the child's stream waits on the parent's go counter, which a side stream
                   of the child's writes after a spin (self-own on the lent counter)
  linked-late-own  linked-own, the parent's stream spinning 2 ms between its flush and the go
  linked-done-own  linked-own, the parent's stream waiting after the go on a second counter
                   of its own, which the child's stream writes after the call (benches/bracket.py)

parent-lent / parent and solo-lent / solo-own isolate the lent memory; solo-own / parent
the process; linked-* / solo-* the wait on the parent.

Settings (environment): PROBE_CALL, `sdpa` (default) or `module:function` of a kernel tree
taking (q, k, v, *, causal, scale), with PROBE_TREE the tree's folder on sys.path (built
already); PROBE_CONFIGS, `b,h,s,d[,causal]` separated by spaces (default: three SDPA
configs); PROBE_ROUNDS (default 120); PROBE_GRAPH_CALLS, a CUDA graph of that many calls
replayed as one sample, as the harness times calls under its graph threshold (default 0: one
call a sample), each way's graph captured on its own inputs, and the time given per call.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from benches import cuda_ipc, timing
from benches.shared_buffers import GoCounter

DEFAULT_CONFIGS = "4,16,2048,128 2,16,2048,128 1,16,2048,128"  # ~0.22, 0.11, 0.06 ms (H200)
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "120"))
GRAPH_CALLS = int(os.environ.get("PROBE_GRAPH_CALLS", "0"))
WARMUP = 10
SPIN_US = int(os.environ.get("PROBE_SPIN_US", "20"))  # linked-spin-own's
COVER_US = 400
CYCLES_PER_US = 2500
WAYS = tuple(
    os.environ.get(
        "PROBE_WAYS", "parent parent-lent solo-lent solo-own linked-lent linked-own"
    ).split()
)


def _flush_buffer() -> torch.Tensor:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")


def configs() -> list[tuple[int, int, int, int, bool]]:
    """(batch, heads, seq, dim, causal) of PROBE_CONFIGS; fp16."""
    found = []
    for word in os.environ.get("PROBE_CONFIGS", DEFAULT_CONFIGS).split():
        parts = word.split(",")
        found.append((*(int(n) for n in parts[:4]), parts[4:] == ["causal"]))
    return found


def the_call(causal: bool):
    """What is timed, on (q, k, v): SDPA, or PROBE_CALL of the tree at PROBE_TREE."""
    spec = os.environ.get("PROBE_CALL", "sdpa")
    if spec == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    sys.path.insert(0, os.environ["PROBE_TREE"])
    module, name = spec.split(":")
    fn = getattr(importlib.import_module(module), name)
    return lambda q, k, v: fn(q, k, v, causal=causal, scale=q.shape[-1] ** -0.5)


def runner(call, inputs):
    """What one sample runs: the call, or a CUDA graph of GRAPH_CALLS of them replayed."""
    if not GRAPH_CALLS:
        return lambda: call(*inputs)
    graph, _ = timing.capture(lambda: call(*inputs), GRAPH_CALLS)
    return graph.replay


def _timed(start, end, flush, fn) -> float:
    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
    flush.zero_()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / max(GRAPH_CALLS, 1)


def child_main(conn) -> None:
    torch.cuda.set_device(0)
    flush = _flush_buffer()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    lent = go = go_mapping = call = own_go = None
    own_count = 0
    runs = {}
    while True:
        message = conn.recv()
        if message[0] == "setup":
            _, descriptors, go_descriptor, done_descriptor, flush_descriptor, causal = message
            mappings = cuda_ipc.Mappings(torch.device("cuda", 0))
            lent = tuple(mappings.tensor(cuda_ipc.Descriptor.from_json(d)) for d in descriptors)
            if go is None:  # one counter for the whole run: a handle opens once a process
                go_mapping = cuda_ipc.Mappings(mappings.device)
                go = go_mapping.tensor(cuda_ipc.Descriptor.from_json(go_descriptor))
                done_mapping = cuda_ipc.Mappings(mappings.device)
                done = done_mapping.tensor(cuda_ipc.Descriptor.from_json(done_descriptor))
                shared_flush_mapping = cuda_ipc.Mappings(mappings.device)
                shared_flush_mapping.tensor(cuda_ipc.Descriptor.from_json(flush_descriptor))
            own = tuple(t.clone() for t in lent)
            call = the_call(causal)
            runs = {"lent": runner(call, lent), "own": runner(call, own)}
            torch.cuda.synchronize()
            conn.send("ok")
        elif message[0] == "kernels":
            conn.send(_kernel_names(call, lent))
        elif message[0] == "time":
            way = message[1]
            run = runs["lent" if way.endswith("lent") else "own"]
            if way.startswith("linked"):  # enqueued behind the go, which comes after the reply
                stream = torch.cuda.current_stream()
                if way == "linked-side-own":
                    side = torch.cuda.Stream()
                    cuda_ipc.wait_until_at_least(side, go.data_ptr(), message[2])
                    stream.wait_event(side.record_event())
                else:
                    cuda_ipc.wait_until_at_least(stream, go.data_ptr(), message[2])
                if way == "linked-spin-own":
                    torch.cuda._sleep(SPIN_US * CYCLES_PER_US)
                if way == "linked-flushed-own":
                    flush.zero_()
                start.record()
                run()
                end.record()
                if way == "linked-done-own":
                    cuda_ipc.write_counter(stream, done.data_ptr(), message[2])
                conn.send("queued")
                end.synchronize()
                conn.send(start.elapsed_time(end) / max(GRAPH_CALLS, 1))
            elif way in ("self-own", "ipc-self-own"):
                if way == "self-own":
                    if own_go is None:
                        own_go = torch.zeros(1, dtype=torch.int32, device="cuda")
                    own_count += 1
                    counter, value = own_go, own_count
                else:
                    counter, value = go, message[2]
                stream, side = torch.cuda.current_stream(), torch.cuda.Stream()
                torch.cuda.synchronize()
                cuda_ipc.wait_until_at_least(stream, counter.data_ptr(), value)
                start.record()
                run()
                end.record()
                with torch.cuda.stream(side):
                    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
                    flush.zero_()
                    cuda_ipc.write_counter(side, counter.data_ptr(), value)
                end.synchronize()
                conn.send(start.elapsed_time(end) / max(GRAPH_CALLS, 1))
            else:
                conn.send(_timed(start, end, flush, run))
        elif message[0] == "quit":
            if go_mapping is not None:
                go_mapping.close()
                done_mapping.close()
            return


def _kernel_names(call, inputs) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(*inputs)
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})


def main() -> None:
    out_path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/own_time_probe.json"
    ctx = mp.get_context("spawn")
    conn, child_end = ctx.Pipe()
    child = ctx.Process(target=child_main, args=(child_end,), daemon=True)
    child.start()
    flush = _flush_buffer()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    order_rng = torch.Generator().manual_seed(7)
    results, kept = [], []
    go = GoCounter(torch.device("cuda", 0))
    done = GoCounter(torch.device("cuda", 0))  # the child writes it: see linked-done-own
    shared_flush = cuda_ipc.DeviceBuffer(flush.shape, flush.dtype, flush.device)
    for b, h, s, d, causal in configs():
        call = the_call(causal)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        buffers = [cuda_ipc.DeviceBuffer(t.shape, t.dtype, t.device) for t in (q, k, v)]
        for buffer, t in zip(buffers, (q, k, v), strict=True):
            buffer.tensor.copy_(t)
        torch.cuda.synchronize()
        kept.extend(buffers)  # freed only once the child has closed its mappings (it exits)
        lent = [buffer.tensor for buffer in buffers]
        descriptors = [buffer.descriptor.to_json() for buffer in buffers]
        conn.send(
            (
                "setup",
                descriptors,
                go.descriptor,
                done.descriptor,
                shared_flush.descriptor.to_json(),
                causal,
            )
        )
        assert conn.recv() == "ok"
        conn.send(("kernels",))
        kernels = {"child": conn.recv(), "parent": _kernel_names(call, (q, k, v))}
        runs = {"parent": runner(call, (q, k, v)), "parent-lent": runner(call, lent)}
        samples = {way: [] for way in WAYS}
        for r in range(ROUNDS + WARMUP):
            for i in torch.randperm(len(WAYS), generator=order_rng).tolist():
                way = WAYS[i]
                if way.startswith("parent"):
                    ms = _timed(start, end, flush, runs[way])
                elif way == "linked-after-own":
                    torch.cuda.synchronize()
                    value = go.arm()
                    flush.zero_()
                    go.release()
                    torch.cuda.synchronize()
                    conn.send(("time", way, value))
                    assert conn.recv() == "queued"
                    ms = conn.recv()
                elif way.startswith("linked"):
                    torch.cuda.synchronize()
                    conn.send(("time", way, go.arm()))
                    assert conn.recv() == "queued"
                    if way == "linked-shared-flush-own":
                        shared_flush.tensor.zero_()
                    else:
                        flush.zero_()
                    if way == "linked-late-own":
                        torch.cuda._sleep(2000 * CYCLES_PER_US)
                    go.release()
                    if way == "linked-done-own":
                        value = done.arm()
                        cuda_ipc.wait_until_at_least(
                            torch.cuda.current_stream(), done._buffer.tensor.data_ptr(), value
                        )
                    ms = conn.recv()
                else:
                    torch.cuda.synchronize()
                    conn.send(("time", way, go.arm() if way == "ipc-self-own" else None))
                    ms = conn.recv()
                if r >= WARMUP:
                    samples[way].append(ms)
        parent = statistics.median(samples["parent"])
        row = {
            "config": f"b{b}h{h}s{s}d{d}" + ("-causal" if causal else ""),
            "kernels": kernels,
            "median_ms": {w: statistics.median(xs) for w, xs in samples.items()},
            "over_parent_us": {
                w: (statistics.median(xs) - parent) * 1e3 for w, xs in samples.items()
            },
            # paired within a round: the same round's parent sample subtracted
            "paired_us": {
                w: statistics.median(
                    (x - p) * 1e3 for x, p in zip(xs, samples["parent"], strict=True)
                )
                for w, xs in samples.items()
            },
            "samples": samples,
        }
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "samples"}), flush=True)
    conn.send(("quit",))
    child.join(timeout=10)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(f"{'config':22} {'parent ms':>10} " + " ".join(f"{w:>12}" for w in WAYS[1:]))
    for row in results:
        print(
            f"{row['config']:22} {row['median_ms']['parent']:10.4f} "
            + " ".join(f"{row['paired_us'][w]:+10.2f}us" for w in WAYS[1:])
        )
    print("(each way's median of paired differences from the parent's, same round)")


if __name__ == "__main__":
    main()
