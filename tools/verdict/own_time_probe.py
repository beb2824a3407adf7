"""Where does a GPU worker's own time gain on the same call timed in the harness's process?
(Issue 49 item 4: SDPA read 0.5-1.1 % longer through its worker at 0.22 ms, never shorter,
H200.) A developer tool for the device machine, run by own_time_probe_device.sh.

One child process, the parent's q, k, v lent to it as benches/shared_buffers.py lends them
(driver allocations, benches/cuda_ipc.DeviceBuffer, opened by handle) and copies of its own
made from them. Each round times, in a shuffled order, the same SDPA call six ways, each as
benches/timing.CudaClock does (a spin, the L2 flushed, then events around the call alone):

  parent        in the parent's own process, on its torch allocations (the harness's `sdpa`)
  parent-lent   in the parent, on the driver allocations it lends
  solo-lent     in the child alone, on the lent buffers
  solo-own      in the child alone, on its own copies
  linked-lent   the child's stream held on the parent's GO event (recorded after the
                parent's spin and flush), its own events around the call: the worker's path
  linked-own    the same, on the child's own copies

parent-lent / parent and solo-lent / solo-own isolate the lent memory; solo-own / parent
the process; linked-* / solo-* the wait on another process's event.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from benches import cuda_ipc

CONFIGS = [  # batch, heads, seq, dim: fp16, non-causal
    (4, 16, 2048, 128),  # the GPU test's config, ~0.22 ms on an H200
    (2, 16, 2048, 128),  # ~0.11 ms
    (1, 16, 2048, 128),  # ~0.06 ms
]
ROUNDS = 120
WARMUP = 10
COVER_US = 400
CYCLES_PER_US = 2500
WAYS = ("parent", "parent-lent", "solo-lent", "solo-own", "linked-lent", "linked-own")


def _flush_buffer() -> torch.Tensor:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")


def _timed(start, end, flush, fn, go=None) -> float:
    if go is None:
        torch.cuda._sleep(COVER_US * CYCLES_PER_US)
        flush.zero_()
    else:  # the parent spun and flushed before its GO
        torch.cuda.current_stream().wait_event(go)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def child_main(conn) -> None:
    torch.cuda.set_device(0)
    flush = _flush_buffer()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    lent = own = go = None
    while True:
        message = conn.recv()
        if message[0] == "setup":
            _, descriptors, go = message
            mappings = cuda_ipc.Mappings(torch.device("cuda", 0))
            lent = tuple(mappings.tensor(cuda_ipc.Descriptor.from_json(d)) for d in descriptors)
            own = tuple(t.clone() for t in lent)
            torch.cuda.synchronize()
            conn.send("ok")
        elif message[0] == "kernels":
            conn.send(_kernel_names(lent))
        elif message[0] == "time":
            way = message[1]
            inputs = lent if way.endswith("lent") else own
            linked = way.startswith("linked")
            # linked: queued behind the parent's GO while the parent still spins
            conn.send(
                _timed(
                    start,
                    end,
                    flush,
                    lambda inputs=inputs: F.scaled_dot_product_attention(*inputs),
                    go if linked else None,
                )
            )
        elif message[0] == "quit":
            return


def _kernel_names(inputs) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(*inputs)
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
    for b, h, s, d in CONFIGS:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        buffers = [cuda_ipc.DeviceBuffer(t.shape, t.dtype, t.device) for t in (q, k, v)]
        for buffer, t in zip(buffers, (q, k, v), strict=True):
            buffer.tensor.copy_(t)
        torch.cuda.synchronize()
        kept.extend(buffers)  # freed only once the child has closed its mappings (it exits)
        lent = [buffer.tensor for buffer in buffers]
        go = torch.cuda.Event(interprocess=True)
        conn.send(("setup", [buffer.descriptor.to_json() for buffer in buffers], go))
        assert conn.recv() == "ok"
        conn.send(("kernels",))
        kernels = {"child": conn.recv(), "parent": _kernel_names((q, k, v))}
        samples = {way: [] for way in WAYS}
        for r in range(ROUNDS + WARMUP):
            for i in torch.randperm(len(WAYS), generator=order_rng).tolist():
                way = WAYS[i]
                if way.startswith("parent"):
                    inputs = lent if way == "parent-lent" else (q, k, v)

                    def call(inputs=inputs):
                        return F.scaled_dot_product_attention(*inputs)

                    ms = _timed(start, end, flush, call)
                elif way.startswith("linked"):
                    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
                    flush.zero_()
                    go.record()
                    conn.send(("time", way))
                    ms = conn.recv()
                else:
                    torch.cuda.synchronize()
                    conn.send(("time", way))
                    ms = conn.recv()
                if r >= WARMUP:
                    samples[way].append(ms)
        parent = statistics.median(samples["parent"])
        row = {
            "config": f"b{b}h{h}s{s}d{d}",
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
    print(f"{'config':16} {'parent ms':>10} " + " ".join(f"{w:>12}" for w in WAYS[1:]))
    for row in results:
        print(
            f"{row['config']:16} {row['median_ms']['parent']:10.4f} "
            + " ".join(f"{row['paired_us'][w]:+10.2f}us" for w in WAYS[1:])
        )
    print("(each way's median of paired differences from the parent's, same round)")


if __name__ == "__main__":
    main()
