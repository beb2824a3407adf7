"""Users' kernels each in a child process (benches/worker.py): the parent's side.

A `RemoteImplementation` stands in the registry for a user's kernel. The gate and the timing
loop talk to it as to any implementation, through the two seams that need it: gate calls
(`correctness.two_calls` runs in the child, the errors against the reference are computed
here) and placements (`RemotePlacement`: the child builds and samples it, the parent
orders the samples and keeps them).

Every request has a time bound (the contract's `call_timeout`). A child that answers
nothing in time is killed; one that dies (a segfault, an abort, a CUDA context lost to an
illegal address) is noted. Either way `WorkerLost` says so in one line, that config's row
fails with it, and the next request starts a fresh child: the run goes on without it.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benches import wire, worker_start
from benches.user_kernel import UserImplementation, declared_unavailable, declared_unsupported
from results_schema import AttentionConfig
from results_schema.kernel_contract import UserKernel

# Importing torch and the kernel's package in a fresh interpreter; generous, since a busy
# machine or a cold disk makes it slow, and a kernel that cannot even start is rare.
START_TIMEOUT_SECONDS = 300.0
# The requests whose replies carry tensors: the child writes them to files the parent
# names (benches/wire.py, `Spill`), at most MAX_TENSORS_PER_REPLY of them.
TENSOR_REQUESTS = ("gate", "probe", "output")
MAX_TENSORS_PER_REPLY = 2


class WorkerLost(Exception):
    """The child crashed, hung or broke the protocol; the message is one line, `worker`
    says whose."""

    def __init__(self, message: str, worker: Worker) -> None:
        super().__init__(message)
        self.worker = worker


class Worker:
    """One child process for one kernel tree, started at the first request (and again at
    the first request after a loss)."""

    def __init__(
        self, kernel: UserKernel, tree: Path, device: torch.device, flush_l2: bool
    ) -> None:
        self.kernel, self.tree, self.device, self.flush_l2 = kernel, tree, device, flush_l2
        self.call_timeout = float(kernel.contract.call_timeout_seconds)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None
        self._spill = wire.Spill()
        self._in_flight: Pending | None = None
        self.generation = 0  # children started so far: placements of an older one are gone

    def request(self, op: str, **fields) -> tuple[dict, list[torch.Tensor]]:
        """The child's reply to one request and the tensors it sent, on the parent's device.
        A reply carrying an error is raised as RequestFailed."""
        return self.send(op, **fields).reply()

    def send(self, op: str, **fields) -> Pending:
        """Sends one request and returns at once; its reply is read by `Pending.reply`, or
        (kept for it) before the next request goes out: one request in flight at a time.
        The parent goes on with its own work meanwhile (a placement of its own built while
        the child builds this one)."""
        self.settle()
        if self._process is None:
            self._start()
        spill = self._spill.path() if op in TENSOR_REQUESTS else None
        self._conn.send_bytes(json.dumps({"op": op, **fields, "spill": spill}).encode())
        self._in_flight = Pending(self, op, spill, time.monotonic() + self.call_timeout)
        return self._in_flight

    def settle(self) -> None:
        """Reads the reply of the request still in flight, if any, into its Pending."""
        pending, self._in_flight = self._in_flight, None
        if pending is not None:
            try:
                pending.outcome = self._reply(pending)
            except (WorkerLost, RequestFailed) as exc:
                pending.outcome = exc

    def _reply(self, pending: Pending) -> tuple[dict, list[torch.Tensor]]:
        reply, tensors = self._receive(pending.deadline, pending.op, pending.spill)
        if "error" in reply:
            if reply.get("lost"):
                self._end()
                raise WorkerLost(f"CUDA context lost: {_text(reply['error'])}", self)
            raise RequestFailed(_text(reply["error"]))
        return reply, tensors

    def _start(self) -> None:
        """The child prestarted for this kernel (benches/worker_start.py), else a new one."""
        args = (self.kernel.model_dump_json(), str(self.tree), str(self.device), self.flush_l2)
        started = worker_start.adopt(args) or worker_start.start(
            args, f"bench-worker-{self.kernel.identity}"
        )
        self._process, self._conn = started
        self.generation += 1
        reply, _ = self._receive(time.monotonic() + START_TIMEOUT_SECONDS, "start")
        if reply.get("state") != wire.READY:
            self._end()
            raise WorkerLost(_text(reply.get("error", "worker did not start")), self)

    def _receive(
        self, deadline: float, op: str, spill: str | None = None
    ) -> tuple[dict, list[torch.Tensor]]:
        try:
            header = json.loads(self._frame(deadline, op))
            if not isinstance(header, dict) or not isinstance(header.get("tensors"), list):
                raise ValueError("reply is not a JSON object with a tensor list")
            if header.get("spilled") is True:
                tensors = self._spilled(header["tensors"], spill)
            else:
                tensors = [
                    wire.decode_tensor(d, self._frame(deadline, op), self.device)
                    for d in header["tensors"]
                ]
        except (ValueError, TypeError, AttributeError) as exc:
            self._end()
            raise WorkerLost(f"broke the protocol ({op}): {_text(exc)}", self) from None
        return header, tensors

    def _spilled(self, descriptors: list, spill: str | None) -> list[torch.Tensor]:
        """The tensors the child wrote to this request's files (only those names, only as
        many as a reply may carry), the files removed once read."""
        if spill is None or len(descriptors) > MAX_TENSORS_PER_REPLY:
            raise ValueError(f"{len(descriptors)} tensors in files it was not asked for")
        try:
            return [
                wire.read_spilled(f"{spill}.{i}", d, self.device) for i, d in enumerate(descriptors)
            ]
        finally:
            wire.Spill.forget(spill, len(descriptors))

    def _frame(self, deadline: float, op: str) -> bytes:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            ready = self._conn.poll(remaining)
            if ready:
                return self._conn.recv_bytes()
        except (EOFError, OSError):
            raise WorkerLost(self._death(op), self) from None
        if not self._process.is_alive():
            raise WorkerLost(self._death(op), self)
        self._end()
        limit = self.call_timeout if op != "start" else START_TIMEOUT_SECONDS
        raise WorkerLost(f"hung: no answer to '{op}' in {limit:g} s (call_timeout)", self)

    def _death(self, op: str) -> str:
        self._process.join(timeout=10)
        code = self._process.exitcode
        self._end()
        if code is not None and code < 0:
            return f"crashed: killed by {signal.Signals(-code).name} during '{op}'"
        return f"crashed: exited with code {code} during '{op}'"

    def _end(self) -> None:
        """Kill the child (if alive) and forget it; the next request starts another."""
        if self._in_flight is not None:
            self._in_flight.outcome = WorkerLost("the worker was ended", self)
            self._in_flight = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def close(self) -> None:
        self._end()
        self._spill.close()


class RequestFailed(Exception):
    """The child answered, with the kernel's error (an exception it raised)."""


@dataclass
class Pending:
    """A request sent, its reply (or the exception reading it raised) not yet taken."""

    worker: Worker
    op: str
    spill: str | None
    deadline: float  # the request's time bound runs from its sending
    outcome: tuple | Exception | None = None

    def reply(self) -> tuple[dict, list[torch.Tensor]]:
        if self.outcome is None:  # still in flight: every other request settled it
            self.worker.settle()
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def _text(value) -> str:
    """One line, bounded: the child's words reach CSV rows and the run's log."""
    return " ".join(str(value).split())[:300]


class RemotePlacement:
    """A placement living in the child: the Placement interface the timing loop uses
    (sample, last_output, refill), each a request with the time bound."""

    _count = 0

    def __init__(
        self,
        remote: RemoteImplementation,
        config: AttentionConfig,
        seed: int,
        mode: str,
        calls: int,
        rng_seed: int,
    ) -> None:
        RemotePlacement._count += 1
        self._worker, self._config = remote.worker, config
        self._key = f"p{RemotePlacement._count}"
        # Not waited for here: the child builds it while the parent builds its own
        # (placement.build); the first use takes the reply (`_placed`).
        self._placing: Pending | None = self._worker.send(
            "place",
            key=self._key,
            config=config.model_dump(mode="json"),
            seed=seed,
            mode=mode,
            calls=calls,
            rng_seed=rng_seed,
        )
        self._generation = self._worker.generation

    def sample(self) -> float:
        """The child's time for one sample, which must be a positive number no larger than
        the wall time the parent saw it take (an upper bound the child cannot move)."""
        self._ready()
        self._worker.settle()  # a reply still in flight is not this sample's time
        started = time.perf_counter()
        reply = self._timed("sample", key=self._key)
        wall_ms = (time.perf_counter() - started) * 1e3
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or not 0 < ms <= wall_ms:
            self._worker.close()
            raise WorkerLost(
                f"reported {_text(ms)} ms for a sample that took {wall_ms:.3f} ms", self._worker
            )
        return float(ms)

    def last_output(self):
        self._ready()
        try:
            reply, tensors = self._worker.request("output", key=self._key)
        except RequestFailed as exc:
            return str(exc)
        return reply["problem"] if "problem" in reply else tensors[0]

    def refill(self, values: tuple, seed: int) -> None:
        """Fresh inputs in the child's copies: made there from `seed` (`values` are the
        parent's, the same numbers)."""
        self._ready()
        self._timed("refill", key=self._key, config=self._config.model_dump(mode="json"), seed=seed)

    def _timed(self, op: str, **fields) -> dict:
        """A request of the timing loop: the kernel raising there (out of memory, say)
        ends its part in this config like a crash does, with its error as the reason."""
        try:
            return self._worker.request(op, **fields)[0]
        except RequestFailed as exc:
            raise WorkerLost(f"raised while timed: {exc}", self._worker) from None

    def drop(self) -> None:
        """Not waited for: the child frees it while the parent frees its own."""
        if self._worker.generation == self._generation:
            self._worker.send("drop", key=self._key)

    def _ready(self) -> None:
        """The placement built (the child's reply to `place` is taken at the first use), in
        the child that built it."""
        placing, self._placing = self._placing, None
        if placing is not None:
            try:
                placing.reply()
            except RequestFailed as exc:
                raise WorkerLost(f"raised while timed: {exc}", self._worker) from None
        if self._worker.generation != self._generation:
            raise WorkerLost("the worker holding this placement was restarted", self._worker)


@dataclass(frozen=True)
class RemoteImplementation(UserImplementation):
    """A user's kernel in its own child process (see the module docstring): `run` is not
    callable here; the gate and the timing loop use `gate`, `probe` and `place`."""

    worker: Worker | None = None

    def gate(self, config: AttentionConfig, seed: int):
        """correctness.TwoCalls or CallProblem of two calls on the seed's inputs."""
        from benches.correctness import CallProblem, TwoCalls

        try:
            reply, outputs = self.worker.request(
                "gate", config=config.model_dump(mode="json"), seed=seed
            )
        except (WorkerLost, RequestFailed) as exc:
            return CallProblem("error", str(exc))
        backend = _text(reply.get("backend", "unknown"))
        if "problem" in reply or len(outputs) != 2:
            return CallProblem(backend, _text(reply.get("problem", "sent no outputs")))
        return TwoCalls(backend, *outputs)

    def probe(self, config: AttentionConfig, capture_seed: int, replay_seed: int):
        """The graph probe's output, or why there is none."""
        try:
            reply, outputs = self.worker.request(
                "probe",
                config=config.model_dump(mode="json"),
                seed=capture_seed,
                replay_seed=replay_seed,
            )
        except (WorkerLost, RequestFailed) as exc:
            return str(exc)
        return _text(reply["problem"]) if "problem" in reply or not outputs else outputs[0]

    def place(self, config, seed, mode, calls, rng_seed) -> RemotePlacement:
        return RemotePlacement(self, config, seed, mode, calls, rng_seed)


def remote_implementation(
    kernel: UserKernel, tree: Path, device: torch.device, flush_l2: bool
) -> RemoteImplementation:
    """The kernel's registry entry: availability and support asked of its worker (the
    declared limits first, without starting one)."""
    child = Worker(kernel, tree, device, flush_l2)
    supports = kernel.contract.supports

    def ask(op: str, **fields) -> str | None:
        try:
            reply, _ = child.request(op, **fields)
        except (WorkerLost, RequestFailed) as exc:
            return str(exc)
        reason = reply.get("reason")
        return _text(reason) if reason else None

    return RemoteImplementation(
        name=kernel.identity,
        run=_runs_in_worker,
        backend_for=lambda *a: "remote",
        available=lambda device: declared_unavailable(kernel, tree, device) or ask("available"),
        unsupported=lambda config: (
            declared_unsupported(supports, config)
            or (
                ask("unsupported", config=config.model_dump(mode="json"))
                if supports.check
                else None
            )
        ),
        worker=child,
    )


def _runs_in_worker(*args):
    raise TypeError("a user's kernel runs in its worker process only")
