"""The child process a kernel runs in (the parent's side is benches/isolation.py).

One worker per kernel tree: it imports the tree's entry point (so two versions of one
package, two builds of one extension, two torch.ops namespaces never meet), and answers the
parent's requests one at a time. It only calls: the parent lends it the inputs
(benches/shared_buffers.py), decides what runs when, times every call with its own clock
(benches/bracket.py), reads the outputs where they lie and judges them against its own
reference (benches/row_checks.py, benches/correctness.py). Nothing this process computes
decides a verdict: a kernel that patches the timers, the checks or this module changes
only what this process says, and the parent believes none of it. The worker may still
report its own time for a call (`own_ms`); the parent fails a kernel whose report is far
from what it measured (a harness that lies is a cheat), and otherwise only logs it.

Messages are JSON frames both ways (benches/wire.py); no tensor crosses the pipe. A crash,
a hang or a CUDA context lost to an illegal address ends this process only.
"""

from __future__ import annotations

import gc
import json
import sys
import traceback
from functools import partial
from pathlib import Path

import torch

from benches import correctness, cpu_threads, cuda_ipc, fp8, timing
from benches.kernel_tree import user_implementation
from benches.shared_buffers import Borrowed
from benches.wire import READY, send_reply
from results_schema import AttentionConfig
from results_schema.kernel_contract import UserKernel


class WorkerState:
    """What one child holds: the kernel, the device, its link to the parent's clock (GPU:
    the parent's go and done counters; its own L2 flush buffer), and its live placements."""

    def __init__(self, kernel: UserKernel, tree: Path, device: str, flush_l2: bool) -> None:
        self.impl = user_implementation(kernel, tree)
        self.device = torch.device(device)
        self.flush: torch.Tensor | None = None  # zeroed before each call (`Placement.call`)
        if self.device.type == "cuda":
            if self.device.index is None:  # the parent's "cuda": the current device, named
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
            if flush_l2:
                self.flush = timing.l2_flush_buffer(self.device)
        # the parent's go and done counters, int32 each, lent (`_bind`)
        self.go: torch.Tensor | None = None
        self.done: torch.Tensor | None = None
        self.counters: Borrowed | None = None
        self.placements: dict[str, Placement] = {}

    def config(self, request: dict) -> AttentionConfig:
        return AttentionConfig.model_validate(request["config"])


class Placement:
    """A placement's buffers as the worker sees them, and the call the parent brackets.
    Single mode: one call on the lent inputs, each output kept a while (timing.OutputRing)
    so that calls write to different buffers. Graph mode: one CUDA graph of `calls` calls,
    the i-th on the i-th lent query buffer, each output kept."""

    def __init__(self, state: WorkerState, request: dict) -> None:
        self.state = state
        self.borrowed = Borrowed(state.device)
        self.queries = queries = [self.borrowed.tensor(d) for d in request["queries"]]
        k, v = self.borrowed.tensor(request["k"]), self.borrowed.tensor(request["v"])
        self.slots = [self.borrowed.tensor(d) for d in request.get("slots", [])]
        self.descales = _borrowed_descales(self.borrowed, request.get("descales", {}))
        causal = state.config(request).causal
        self.fns = [partial(state.impl.run, q, k, v, causal, **self.descales) for q in queries]
        self.graph = None
        self.calls = int(request["calls"])
        self.described: dict[int, bytes] = {}
        if request["mode"] == "graph":
            self.graph, self.outputs = timing.capture_each(self.fns[: self.calls])
        else:
            self.ring = timing.OutputRing()
        cuda = state.device.type == "cuda"
        self.own = (
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            if cuda
            else None
        )
        self.own_pending = False
        self.cpu_clock = None if cuda else timing.CpuClock()

    def placed(self) -> dict:
        """The reply to `place`: in graph mode, where each captured call's output lies."""
        if self.graph is None:
            return {}
        return {"outputs": [self._describe(out) for out in self.outputs]}

    def call(self, go: int | None) -> dict:
        """One sample's call(s). On the GPU the call waits for the parent's go counter to
        reach `go` (the parent writes the fresh queries into the lent buffers before it,
        inside its bracket), and writes `go` into the parent's done counter after it.

        Between the go and the call this worker flushes the L2 too, where the plan flushes:
        the parent has flushed it already, but an L2 left full of the lines another process
        wrote last slowed a kernel there. cuda-extension's naive kernel (fp16 2 x 16 x 4096 x
        64 causal) read 128.0 ms a call in every way the parent's stream wrote last before
        it, 121.0 ms alone, and 120.8 ms with this flush (tools/verdict/own_time_probe.py,
        H200, 2026-11-30). A worker that skips it gains nothing: the parent's flush stands.
        It lies inside the parent's bracket, and the calibration's worker runs it too."""
        return self._gpu_call(go) if self.own is not None else self._cpu_call()

    def _gpu_call(self, go: int | None) -> dict:
        reply = {}
        stream = torch.cuda.current_stream(self.state.device)
        if not isinstance(go, int) or self.state.go is None:
            raise ValueError("a GPU call needs the parent's counters and the go's value")
        cuda_ipc.wait_until_at_least(stream, self.state.go.data_ptr(), go)
        if self.state.flush is not None:
            self.state.flush.zero_()
        self.own[0].record(stream)
        if self.graph is not None:
            self.graph.replay()
            out = None
        else:
            out = self.fns[0]()
            self.ring.hold(out)
        self.own[1].record(stream)
        cuda_ipc.write_counter(stream, self.state.done.data_ptr(), go)
        self.own_pending = True
        if out is not None:
            if not isinstance(out, torch.Tensor) or not out.is_cuda:
                raise TypeError(f"returned {type(out).__name__}, not a CUDA tensor")
            reply["outputs"] = [self._describe(out)]
        return reply

    def own_ms(self) -> dict:
        """The worker's own time of its last GPU call (per call), once its work is over."""
        if self.own is None or not self.own_pending or not self.own[1].query():
            return {}
        self.own_pending = False
        return {"own_ms": self.own[0].elapsed_time(self.own[1]) / self.calls}

    def _cpu_call(self) -> dict:
        """Every call of the sample (one, or a batch: each on its own query buffer), then
        each output copied into its slot of the parent's."""
        outputs = []
        own = self.cpu_clock.time_call(
            lambda: outputs.extend(fn() for fn in self.fns[: self.calls])
        )
        for out, slot in zip(outputs, self.slots, strict=False):
            problem = correctness.output_problem(out, slot.shape, slot.dtype, slot.device)
            if problem:
                raise TypeError(problem)
            slot.copy_(out)
        return {"own_ms": own / self.calls}

    def _describe(self, out: torch.Tensor) -> dict:
        return cuda_ipc.describe(out, self.described).to_json()

    def close(self) -> None:
        self.fns, self.graph, self.slots = [], None, []
        self.borrowed.close()


# --- requests --------------------------------------------------------------------------
# Each takes the state and the request and returns the reply.


def _bind(state: WorkerState, request: dict) -> dict:
    """The GPU link to the parent's clock: its go and done counters mapped (this worker's
    stream waits for the go to reach each call's value before the call, and writes the
    value into the done counter after it)."""
    if state.counters is not None:
        state.counters.close()
    state.counters = Borrowed(state.device)
    state.go, state.done = (state.counters.tensor(request[name]) for name in ("go", "done"))
    for counter in (state.go, state.done):
        if counter.dtype != torch.int32 or counter.numel() != 1:
            raise ValueError("a counter is one int32")
    return {}


def _available(state: WorkerState, request: dict) -> dict:
    return {"reason": state.impl.available(state.device)}


def _unsupported(state: WorkerState, request: dict) -> dict:
    return {"reason": state.impl.unsupported(state.config(request))}


def _gate(state: WorkerState, request: dict) -> dict:
    """Two calls on the lent inputs (benches/correctness.two_calls: shape, dtype, device,
    aliasing, inputs unchanged, as this process sees them); their outputs copied into the
    lent slots, where the parent reads and judges them."""
    config = state.config(request)
    borrowed = Borrowed(state.device)
    try:
        inputs = _inputs(borrowed, request["inputs"], request.get("descales", {}))
        outcome = correctness.two_calls(
            state.impl, inputs, config.causal, correctness.output_dtype(config)
        )
        if isinstance(outcome, correctness.CallProblem):
            return {"backend": outcome.backend, "problem": outcome.message}
        for slot, out in zip(request["slots"], (outcome.first, outcome.second), strict=True):
            borrowed.tensor(slot).copy_(out)
        _synchronize(state.device)
        return {"backend": outcome.backend}
    finally:
        borrowed.close()


def _borrowed_descales(borrowed: Borrowed, descriptors: dict) -> dict[str, torch.Tensor]:
    """FP8 inputs' descales as the call takes them (keyword arguments), none for others."""
    if set(descriptors) - set(fp8.DESCALE_NAMES):
        raise ValueError(f"unknown descales {sorted(descriptors)}")
    return {name: borrowed.tensor(d) for name, d in descriptors.items()}


def _inputs(borrowed: Borrowed, descriptors: list, descales: dict) -> tuple:
    """The lent q, k and v; with descales, FP8 inputs that carry them (benches/fp8.py)."""
    tensors = tuple(borrowed.tensor(d) for d in descriptors)
    if not descales:
        return tensors
    scales = _borrowed_descales(borrowed, descales)
    return fp8.QuantizedInputs(tensors, [scales[name] for name in fp8.DESCALE_NAMES])


def _probe(state: WorkerState, request: dict) -> dict:
    config = state.config(request)
    borrowed = Borrowed(state.device)
    try:
        capture = _inputs(borrowed, request["capture"], request.get("capture_descales", {}))
        replay = _inputs(borrowed, request["replay"], request.get("replay_descales", {}))
        try:
            out = correctness.graph_probe(state.impl, capture, replay, config.causal)
        except Exception as exc:  # capture refused the work: it left the calling stream
            return {"problem": f"graph capture failed: {correctness.one_line(exc)}"}
        problem = correctness.output_problem(out, capture[0].shape, None, state.device)
        if problem:
            return {"problem": problem}
        borrowed.tensor(request["slot"]).copy_(out)
        _synchronize(state.device)
        return {}
    finally:
        borrowed.close()


def _place(state: WorkerState, request: dict) -> dict:
    placement = Placement(state, request)
    state.placements[request["key"]] = placement
    return placement.placed()


def _call(state: WorkerState, request: dict) -> dict:
    go = request.get("go")
    return state.placements[request["key"]].call(None if go is None else int(go))


def _drop(state: WorkerState, request: dict) -> dict:
    """The placement's buffers given back. The caching allocator keeps its memory: the next
    placement's outputs land in the allocations the parent has mapped already (a new one
    costs the parent a slow IPC open: an empty cache here put one in most samples of a
    block)."""
    placement = state.placements.pop(request["key"], None)
    if placement is not None:
        _synchronize(state.device)
        placement.close()
    gc.collect()  # here, never during a capture (see serve)
    return {}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


REQUESTS = {
    "bind": _bind,
    "available": _available,
    "unsupported": _unsupported,
    "gate": _gate,
    "probe": _probe,
    "place": _place,
    "call": _call,
    "drop": _drop,
}


# Requests that call the kernel and catch its errors as results: after them, the context is
# checked (a failed call raises, and is checked in the handler's except branch).
USER_CODE_REQUESTS = ("gate", "probe", "place")


def context_lost(device: torch.device, probe: bool = True) -> bool:
    """Whether the CUDA context is gone (an illegal address is sticky: every later call
    fails): then this worker must end and the parent starts a fresh one. Without `probe`
    only a synchronize, which launches nothing: after a timed call the GPU must have no
    work of this worker's left to switch to while the parent reads the output (one more
    switch of contexts costs ~0.27 ms, seen inside the parent's brackets on an H200)."""
    if device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(device)
        if probe:
            torch.ones(1, device=device).add_(1).item()
        return False
    except Exception:
        return True


def serve(conn, kernel_json: str, tree: str, device: str, flush_l2: bool) -> None:
    """The child's loop: one reply per request until the parent closes the pipe. `flush_l2`:
    whether the plan flushes the L2 before each sample (`Placement.call`)."""
    # The parent's intra-op threads, by the same rule (benches/cpu_threads.py): set here, as
    # torch was imported in the fork server, before this run's environment reached it.
    cpu_threads.use(device)
    try:
        state = WorkerState(
            UserKernel.model_validate_json(kernel_json), Path(tree), device, flush_l2
        )
    except Exception as exc:
        send_reply(conn, {"error": f"worker could not start: {correctness.one_line(exc)}"})
        return
    # No collection inside a call, and none inside a graph capture, where freeing an
    # earlier placement's graph invalidates the capture.
    gc.disable()
    # The imports (torch, the kernel) live as long as this process: frozen, the collection
    # at each `drop` walks only what the requests made (unfrozen, 100 ms a drop on an H100:
    # 14 s of the default plan's benchmark, 2026-11-27).
    gc.collect()
    gc.freeze()
    send_reply(conn, {"state": READY})
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        handler = REQUESTS.get(request.get("op"))
        try:
            if handler is None:
                raise ValueError(f"unknown request {request.get('op')!r}")
            reply = handler(state, request)
        except Exception as exc:  # the kernel's failure, or its output's: the parent's row
            traceback.print_exc(file=sys.stderr)
            lost = context_lost(state.device)
            send_reply(conn, {"error": correctness.one_line(exc), "lost": lost})
            if lost:
                return
            continue
        if request["op"] in USER_CODE_REQUESTS and context_lost(state.device):
            # The kernel's error was caught as a problem, but its context died with it.
            why = reply.get("problem") or "the kernel's call left no working CUDA context"
            send_reply(conn, {"error": why, "lost": True})
            return
        send_reply(conn, reply)
        if request["op"] == "call" and state.device.type == "cuda":
            # A second frame once the call's work is over: the parent waits for the call on
            # the GPU, and hears here at once when it failed there (an illegal address).
            if context_lost(state.device, probe=False):
                why = "the kernel's call left no working CUDA context"
                send_reply(conn, {"error": why, "lost": True})
                return
            send_reply(conn, {"finished": True, **state.placements[request["key"]].own_ms()})
