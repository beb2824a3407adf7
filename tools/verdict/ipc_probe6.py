"""Sixth device probe for issue 48 (developer tool): the parent's stream waits on an
interprocess event the child records after a long kernel; the child is killed. Does the
parent's own record of that event (on another stream) release the wait?"""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.multiprocessing as mp


def child_main(conn):
    torch.cuda.set_device(0)
    done = torch.cuda.Event(interprocess=True)
    conn.send(done)
    conn.recv()
    torch.cuda._sleep(int(20e9))
    done.record()
    conn.send("recorded")
    time.sleep(60)


def main():
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=child_main, args=(b,), daemon=True)
    p.start()
    done = a.recv()
    waiting = torch.cuda.Stream()
    rescue = torch.cuda.Stream()
    t1 = torch.cuda.Event(enable_timing=True)
    a.send("go")
    assert a.recv() == "recorded"
    waiting.wait_event(done)
    t1.record(waiting)
    time.sleep(0.5)
    print("before kill:", t1.query(), flush=True)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    time.sleep(0.5)
    print("after kill:", t1.query(), flush=True)
    done.record(rescue)
    start = time.monotonic()
    while not t1.query() and time.monotonic() - start < 10:
        time.sleep(0.01)
    print(
        f"after the parent's own record: {t1.query()} after {time.monotonic() - start:.3f} s",
        flush=True,
    )
    if t1.query():
        torch.cuda.synchronize()
        print("parent's context works:", torch.ones(3, device="cuda").sum().item(), flush=True)


if __name__ == "__main__":
    main()
