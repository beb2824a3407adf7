"""The child process a user's kernel runs in (the parent's side is benches/isolation.py).

One worker per kernel tree: it imports the tree's entry point (so two versions of one
package, two builds of one extension, two torch.ops namespaces never meet), and answers the
parent's requests one at a time: gate calls, graph probes, placements and their samples.
The parent decides what runs when (the interleaved order, the counts), computes every
error against its own reference and keeps the statistics; the worker makes the inputs
from the seeds it is sent (the same generator, so the same values as the parent's) and
times each sample with the same clock the parent uses for its own implementations.

Messages are JSON frames, tensors raw frames after them or files the parent named
(`send_reply`): nothing the child sends is unpickled by the parent. The child is no
security boundary (same user, same machine: docs/security.md draws that line at the VM);
it is a fault boundary. A crash, a hang or a CUDA context lost to an illegal address ends
this process only.
"""

from __future__ import annotations

import gc
import json
import sys
import traceback
from pathlib import Path

import numpy as np
import torch

from benches import correctness, placement, timing
from benches.user_kernel import user_implementation
from benches.wire import READY, send_reply
from results_schema import AttentionConfig
from results_schema.kernel_contract import UserKernel


class WorkerState:
    """What one child holds: the kernel, the device, the clock and its live placements."""

    def __init__(self, kernel: UserKernel, tree: Path, device: str, flush_l2: bool) -> None:
        self.impl = user_implementation(kernel, tree)
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if self.device.index is None:  # the parent's "cuda": the current device, named
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
            self.clock = timing.CudaClock(self.device, flush_l2)
        else:
            self.clock = timing.CpuClock()
        self.placements: dict[str, placement.Placement] = {}

    def inputs(self, request: dict) -> tuple[AttentionConfig, tuple]:
        config = AttentionConfig.model_validate(request["config"])
        return config, correctness.make_inputs(config, self.device, int(request["seed"]))


# --- requests --------------------------------------------------------------------------
# Each takes the state and the request and returns (reply, tensors).


def _available(state: WorkerState, request: dict):
    return {"reason": state.impl.available(state.device)}, ()


def _unsupported(state: WorkerState, request: dict):
    config = AttentionConfig.model_validate(request["config"])
    return {"reason": state.impl.unsupported(config)}, ()


def _gate(state: WorkerState, request: dict):
    """Two calls on the seed's inputs, checked here where their memory is (shape, dtype,
    device, aliasing, inputs unchanged); the outputs go back for the parent's errors."""
    config, inputs = state.inputs(request)
    outcome = correctness.two_calls(state.impl, inputs, config.causal, inputs[0].dtype)
    if isinstance(outcome, correctness.CallProblem):
        return {"backend": outcome.backend, "problem": outcome.message}, ()
    return {"backend": outcome.backend}, (outcome.first, outcome.second)


def _probe(state: WorkerState, request: dict):
    config, capture_inputs = state.inputs(request)
    replay = correctness.make_inputs(config, state.device, int(request["replay_seed"]))
    try:
        out = correctness.graph_probe(state.impl, capture_inputs, replay, config.causal)
    except Exception as exc:  # capture refused the work: it left the calling stream
        return {"problem": f"graph capture failed: {correctness.one_line(exc)}"}, ()
    return {}, (out,)


def _place(state: WorkerState, request: dict):
    config, inputs = state.inputs(request)
    rng = np.random.default_rng(int(request["rng_seed"]))
    state.placements[request["key"]] = placement.Placement(
        state.clock,
        state.impl,
        inputs,
        config.causal,
        request["mode"],
        int(request["calls"]),
        rng,
    )
    return {}, ()


def _sample(state: WorkerState, request: dict):
    return {"ms": state.placements[request["key"]].sample()}, ()


def _output(state: WorkerState, request: dict):
    """The placement's latest output, then poisoned (NaN) where it lies: returned again
    unwritten, it fails the next check."""
    out = state.placements[request["key"]].last_output()
    if not isinstance(out, torch.Tensor):
        return {"problem": f"returned {type(out).__name__}, not a tensor"}, ()
    sent = out.clone()
    correctness.poison(out)
    return {}, (sent,)


def _refill(state: WorkerState, request: dict):
    _, fresh = state.inputs(request)
    state.placements[request["key"]].refill(fresh, None)
    return {}, ()


def _drop(state: WorkerState, request: dict):
    state.placements.pop(request["key"], None)
    gc.collect()  # here, never during a capture (see serve)
    if state.device.type == "cuda":
        torch.cuda.empty_cache()
    return {}, ()


REQUESTS = {
    "available": _available,
    "unsupported": _unsupported,
    "gate": _gate,
    "probe": _probe,
    "place": _place,
    "sample": _sample,
    "output": _output,
    "refill": _refill,
    "drop": _drop,
}


# Requests that call the kernel and catch its errors as results: after them, the context is
# checked (a sample's failure raises, and is checked in the handler's except branch).
USER_CODE_REQUESTS = ("gate", "probe", "place")


def context_lost(device: torch.device) -> bool:
    """Whether the CUDA context is gone (an illegal address is sticky: every later call
    fails): then this worker must end and the parent starts a fresh one."""
    if device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
        return False
    except Exception:
        return True


def serve(conn, kernel_json: str, tree: str, device: str, flush_l2: bool) -> None:
    """The child's loop: one reply per request until the parent closes the pipe."""
    try:
        state = WorkerState(
            UserKernel.model_validate_json(kernel_json), Path(tree), device, flush_l2
        )
    except Exception as exc:
        send_reply(conn, {"error": f"worker could not start: {correctness.one_line(exc)}"})
        return
    # As in the parent's timing loop: no collection inside a timed call, and none inside a
    # graph capture, where freeing an earlier placement's graph invalidates the capture.
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
            reply, tensors = handler(state, request)
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
        send_reply(conn, reply, tensors, request.get("spill"))
