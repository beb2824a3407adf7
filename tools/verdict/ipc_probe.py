"""Can the measuring process time a kernel that runs in another process, on the GPU, to
within 1 % of CUDA events taken around the call in its own process? (Issue 48's design
question; a developer tool for the device machine, run by tools/verdict/probe_device.sh.)

The parent brackets the child's call with its own timing events, the child's stream held
on an interprocess event the parent records (GO) and the parent's stream held on one the
child records after the call (DONE); between its start event and GO the parent writes
fresh q into the shared buffer and flushes L2, so the child cannot start early. A child
running a null call (the copy-out alone) gives what the bracket costs; the bracketed time
less the null's median is compared with the in-process time of the same call.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

CONFIGS = [  # batch, heads, seq, dim, causal
    (1, 8, 512, 64, False),
    (4, 16, 1024, 64, False),
    (4, 16, 1024, 128, True),
    (4, 16, 2048, 128, False),
    (2, 16, 4096, 128, False),
    (1, 16, 8192, 128, True),
]
ROUNDS = 60
COVER_US = 600
CYCLES_PER_US = 2500
ROWS = 64


def child_main(conn, null: bool) -> None:
    torch.cuda.set_device(0)
    stream = torch.cuda.Stream()
    done = torch.cuda.Event(interprocess=True)
    conn.send(("done", done))
    own0 = torch.cuda.Event(enable_timing=True)
    own1 = torch.cuda.Event(enable_timing=True)
    q = k = v = slot = go = None
    causal = False
    kept = None
    while True:
        msg = conn.recv()
        op = msg[0]
        if op == "setup":
            _, q, k, v, slot, go, causal = msg
            kept = torch.empty_like(q)
            torch.cuda.synchronize()
            conn.send("ok")
        elif op == "arm":
            with torch.cuda.stream(stream):
                stream.wait_event(go)
                own0.record(stream)
                if null:
                    out = kept
                else:
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                own1.record(stream)
                slot.copy_(out)
                done.record(stream)
            conn.send("armed")
        elif op == "own":
            own1.synchronize()
            conn.send(own0.elapsed_time(own1))
        elif op == "quit":
            return


def median_iqr(xs):
    xs = sorted(xs)
    q1, q3 = xs[len(xs) // 4], xs[(3 * len(xs)) // 4]
    return statistics.median(xs), q3 - q1


def main() -> None:
    out_path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ipc_probe.json"
    ctx = mp.get_context("spawn")
    children = {}
    for name, null in (("real", False), ("null", True)):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=child_main, args=(child_end, null), daemon=True)
        proc.start()
        tag, done = parent_end.recv()
        children[name] = (proc, parent_end, done)
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev)
    stream = torch.cuda.current_stream()
    gen = torch.Generator(device=dev).manual_seed(1)
    rng = torch.Generator().manual_seed(2)
    results = []
    for b, h, s, d, causal in CONFIGS:
        shape = (b, h, s, d)
        shared = {}
        for name, (_proc, conn, _done) in children.items():
            q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16) for _ in range(3))
            slot = torch.empty_like(q)
            go = torch.cuda.Event(interprocess=True)
            conn.send(("setup", q, k, v, slot, go, causal))
            assert conn.recv() == "ok"
            shared[name] = (q, k, v, slot, go)
        pq, pk, pv = (torch.randn(shape, device=dev, dtype=torch.bfloat16) for _ in range(3))
        fresh = torch.empty_like(pq)
        samples = {"inproc": [], "real": [], "null": [], "own": [], "refresh": []}
        early = {"real": 0, "null": 0}
        mismatched = 0
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        for r in range(ROUNDS + 5):
            order = torch.randperm(4, generator=rng).tolist()
            for which in order:
                fresh.normal_(generator=gen)
                if which == 0:  # in process: the old path
                    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
                    flush.zero_()
                    t0.record()
                    F.scaled_dot_product_attention(pq, pk, pv, is_causal=causal)
                    t1.record()
                    t1.synchronize()
                    key = "inproc"
                elif which == 3:  # the bracket's own work, in process
                    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
                    t0.record()
                    pq.copy_(fresh)
                    flush.zero_()
                    t1.record()
                    t1.synchronize()
                    key = "refresh"
                else:
                    key = "real" if which == 1 else "null"
                    proc, conn, done = children[key]
                    q, k, v, slot, go = shared[key]
                    torch.cuda._sleep(COVER_US * CYCLES_PER_US)
                    t0.record()
                    q.copy_(fresh)
                    flush.zero_()
                    go.record()
                    conn.send(("arm",))
                    assert conn.recv() == "armed"
                    if go.query():
                        early[key] += 1
                    stream.wait_event(done)
                    rows = torch.randint(0, b * h * s, (ROWS,), device=dev)
                    gathered = slot.view(-1, d).index_select(0, rows)
                    t1.record()
                    t1.synchronize()
                    if key == "real" and r % 10 == 0:
                        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        want = ref.view(-1, d).index_select(0, rows)
                        if not torch.allclose(gathered.float(), want.float(), atol=2e-2):
                            mismatched += 1
                    if key == "real":
                        conn.send(("own",))
                        own = conn.recv()
                        if r >= 5:
                            samples["own"].append(own)
                if r >= 5:
                    samples[key].append(t0.elapsed_time(t1))
        row = {"config": f"b{b}h{h}s{s}d{d}{'-causal' if causal else ''}"}
        for key, xs in samples.items():
            row[key] = median_iqr(xs)
        null_med = row["null"][0]
        row["real_minus_null"] = row["real"][0] - null_med
        row["ratio_vs_inproc"] = row["real_minus_null"] / row["inproc"][0]
        row["own_vs_inproc"] = row["own"][0] / row["inproc"][0]
        row["switch_ms"] = null_med - row["refresh"][0]
        row["early"] = early
        row["mismatched"] = mismatched
        results.append(row)
        print(json.dumps(row), flush=True)
    for proc, conn, _ in children.values():
        conn.send(("quit",))
        proc.join(timeout=10)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(
        f"{'config':26} {'inproc ms':>10} {'real-null':>10} {'ratio':>7} {'own/in':>7} "
        f"{'iqr in':>7} {'iqr real':>8} {'switch':>7} early"
    )
    for row in results:
        print(
            f"{row['config']:26} {row['inproc'][0]:10.4f} {row['real_minus_null']:10.4f} "
            f"{row['ratio_vs_inproc']:7.4f} {row['own_vs_inproc']:7.4f} {row['inproc'][1]:7.4f} "
            f"{row['real'][1]:8.4f} {row['switch_ms']:7.4f} {row['early']}"
        )


if __name__ == "__main__":
    time.sleep(0)
    main()
