"""Kernels with a contract each in a child process (benches/worker.py): the parent's side.

A `RemoteImplementation` stands in the registry for a user's kernel (and ours). The gate
and the timing loop use it through the seams that need it: gate calls (`gate`, `probe`:
the parent lends the inputs and output slots, the worker calls, the parent reads the slots
and judges) and placements (`MeasuredPlacement`: the parent lends the inputs, brackets each
call with its own clock and checks every call's output where it lies: benches/bracket.py,
benches/row_checks.py). What the worker says of itself is never a result.

Every request has a time bound (the contract's `call_timeout`). A child that answers
nothing in time is killed; one that dies (a segfault, an abort, a CUDA context lost to an
illegal address) is noted. Either way `WorkerLost` says so in one line, that config's row
fails with it, and the next request starts a fresh child: the run goes on without it. A
worker whose answer the harness refuses (a wrong output, a time of its own far from the
harness's) is `Refused` the same way.
"""

from __future__ import annotations

import collections
import json
import math
import multiprocessing
import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benches import bracket as brackets
from benches import confinement, cuda_ipc, host_load, row_checks, wire, worker_start
from benches.correctness import CallProblem, TwoCalls, modified_input, output_dtype
from benches.fp8 import DESCALE_NAMES, descales_of, is_fp8
from benches.kernel_tree import UserImplementation, declared_unavailable, declared_unsupported
from benches.shared_buffers import DoneCounter, GoCounter, Lender, fill_fresh
from results_schema import AttentionConfig
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel

# Importing torch and the kernel's package in a fresh interpreter; generous, since a busy
# machine or a cold disk makes it slow, and a kernel that cannot even start is rare.
START_TIMEOUT_SECONDS = 300.0
# A kernel's own time for a call is checked against the harness's for the same samples once
# OWN_TIME_MIN_SAMPLES have both. On a loaded 2-core CPU the bracket holds two wake-ups more
# than the call (the request, the reply): an SDPA call of 0.02 ms read 4.5-19.5 ms in its own
# process and 8-25 ms in the harness's, four samples running, and honest reports sat 4-12 ms
# under the harness's lower quartile (2026-11-29, 3 and 6 runs at once on 2 cores, 21 runs).
# A rule on the median report against the middle half of the harness's samples at 25 %, from
# the third, called 12 of those 252 honest placements liars; CPU_OWN_FRACTION's none, and
# caught a clock divided by 20 on every config of every run.
CPU_OWN_FLOOR_MS = 0.25  # a CPU report is a lie only this far under a quarter of the fastest sample
OWN_TIME_MIN_SAMPLES = 5
# On the CPU the harness's figure carries the host's scheduling on top of the call, one-sided
# and at times every sample long (two test suites at once on 2 cores read an honest 1.8 ms
# call at 21.8 ms, five samples running, 2026-11-29): a report is taken for a lie under its
# fastest sample only, at a quarter (a clock divided by 20 stays far below even that).
CPU_OWN_FRACTION = 0.25
# On the GPU a worker's sample is still its own events' time, bounded above by the harness's
# whole bracket and checked against the harness's figure (the bracket less the calibration).
# Single launches: the median of the paired differences (harness's less the report) may not
# exceed GPU_REPORT_ALLOWANCE_MS["single"] plus GPU_REPORT_ALLOWANCE_FRACTION of the
# harness's median. Honest medians sat at -1 to 16 us a call (our kernel, the default plan's
# single-launch configs of 0.04-0.6 ms, 50 samples each, two H200 runs, 2026-11-29; each
# sample's difference spread 20-60 us either side while the host polled the worker's DONE
# event before the end event; the parent's stream now waits on its done counter). Why not
# the harness's figure as the sample: at that spread it would
# take 10-20x the samples to see 3 %, and read a worker's kernel up to 11 % slower than the
# same call in the parent. A graph replay is judged by the same rule, its allowance per
# replay: once no handshake was left inside its bracket (bracket.py), the harness's median
# sat 2-3 % over honest reports of 4-7 us calls (the default plan's
# three graph configs, H200, 2026-11-29); before, most graph samples held the host's
# enqueue and read up to 4x. What a report may still shave is this allowance
# (docs/security.md, "The verdict belongs to the harness"). A worker of another user (every
# kernel's on a VM) is bracketed the same way (bracket.py: counters, not events), and held to
# the same allowance: before, its bracket was gated from the host, held the handshake, and
# had 1.5 ms (a report divided by 20 passed below about 2 ms a call).
GPU_REPORT_ALLOWANCE_MS = {"single": 0.02, "graph": 0.1}
GPU_REPORT_ALLOWANCE_FRACTION = 0.1
# A sample the calibration leaves nothing of (noise) is taken again this many times.
NONPOSITIVE_RETAKES = 3
GRAPH_OUTPUTS_CHECKED = 3  # in graph mode: the last call's output and this many more


class WorkerLost(Exception):
    """The child crashed, hung or broke the protocol; the message is one line, `worker`
    says whose."""

    def __init__(self, message: str, worker: Worker) -> None:
        super().__init__(message)
        self.worker = worker


class Refused(WorkerLost):
    """The harness refused what a worker answered: an output that fails its check where
    the harness read it, or a time of its own far from the harness's."""


class RequestFailed(Exception):
    """The child answered, with the kernel's error (an exception it raised)."""


@dataclass
class Link:
    """A GPU worker's link to the parent's clock: the parent's go counter, the counter the
    worker writes when a call's work is over, and how long its latest replies to a call
    took (us: what the parent waits for the next, bracket.REPLY_FACTOR)."""

    go: GoCounter
    done: DoneCounter
    generation: int
    replies: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=brackets.REPLY_HISTORY)
    )


class Worker:
    """One child process for one kernel tree, started at the first request (and again at
    the first request after a loss)."""

    def __init__(
        self,
        kernel: UserKernel,
        tree: Path,
        device: torch.device,
        flush_l2: bool,
        confined: bool = True,
        gated: bool = False,
    ) -> None:
        self.kernel, self.tree, self.device, self.flush_l2 = kernel, tree, device, flush_l2
        # A kernel's worker runs as its tree's user where the run confines kernels
        # (benches/confinement.py); the harness's own calibration worker runs no kernel's code.
        self.confined = confined
        self._gated = gated  # a calibration worker for brackets gated from the host
        self.call_timeout = float(kernel.contract.call_timeout_seconds)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None
        self._in_flight: Pending | None = None
        self._link: Link | None = None
        self._to_free: list = []  # lent buffers the child may map until its next reply
        self._figures: dict[tuple[str, str], _Figures] = {}
        self.lender = Lender(device)
        self.generation = 0  # children started so far: placements of an older one are gone

    def pid(self) -> int | None:
        """The child's process id while it runs (what host_load reads), else None."""
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    def request(self, op: str, **fields) -> dict:
        """The child's reply to one request. A reply carrying an error is raised as
        RequestFailed."""
        return self.send(op, **fields).reply()

    def send(self, op: str, **fields) -> Pending:
        """Sends one request and returns at once; its reply is read by `Pending.reply`, or
        (kept for it) before the next request goes out: one request in flight at a time.
        The parent goes on with its own work meanwhile (a placement of its own built while
        the child builds this one)."""
        self.settle()
        if self._process is None:
            self._start()
        self._conn.send_bytes(json.dumps({"op": op, **fields}).encode())
        self._in_flight = Pending(self, op, time.monotonic() + self.call_timeout)
        return self._in_flight

    def settle(self) -> None:
        """Reads the reply of the request still in flight, if any, into its Pending; then
        frees what the child was lent and has given up."""
        pending, self._in_flight = self._in_flight, None
        if pending is not None:
            try:
                pending.outcome = self._reply(pending)
            except (WorkerLost, RequestFailed) as exc:
                pending.outcome = exc
        self._free_returned()

    def answered(self, seconds: float) -> bool:
        """Whether the request in flight has its reply waiting (or the child ended), after
        at most `seconds`."""
        try:
            return self._conn is None or self._conn.poll(seconds)
        except (EOFError, OSError):
            return True

    def figures(self, config: str, mode: str) -> _Figures:
        """The harness's and this kernel's own times of its calls on `config` in `mode`,
        as they came (`MeasuredPlacement._compare`), for as long as this Worker lives."""
        return self._figures.setdefault((config, mode), _Figures())

    def free_later(self, lent: list) -> None:
        """Frees `lent` once the child has answered its next request (the `drop` just sent),
        so that no buffer is freed while the child still maps it."""
        self._to_free.extend(lent)
        if self._in_flight is None:
            self._free_returned()

    def _free_returned(self) -> None:
        for buffer in self._to_free:
            buffer.free()
        self._to_free.clear()

    def _reply(self, pending: Pending) -> dict:
        reply = self._receive(pending.deadline, pending.op)
        if "error" in reply:
            if reply.get("lost"):
                self._end()
                raise WorkerLost(f"CUDA context lost: {_text(reply['error'])}", self)
            raise RequestFailed(_text(reply["error"]))
        return reply

    def link(self) -> Link | None:
        """The GPU worker's link to the parent's clock (made at its first use by this child),
        or None where the bracket is gated from the host (the CPU). Counters, not events:
        a worker that runs as another user than the harness (benches/confinement.py) shares
        memory with it, but no interprocess event (cudaErrorMapBufferObjectFailed either way
        on an H200, 2026-11-29)."""
        if self.gated():
            return None
        self.settle()
        if self._process is None:
            self._start()
        if self._link is None or self._link.generation != self.generation:
            self._unlink()
            link = Link(GoCounter(self.device), DoneCounter(self.device), self.generation)
            try:
                self.request("bind", go=link.go.descriptor, done=link.done.descriptor)
            except BaseException:
                link.go.free()
                link.done.free()
                raise
            self._link = link
        return self._link

    def _unlink(self) -> None:
        """The link's counters freed; the parent's stream first released from any wait on
        the worker's word (DoneCounter.force): a freed buffer waits for the device."""
        if self._link is not None:
            self._link.done.force(self._link.go.armed)
            self._link.go.free()
            self._link.done.free()
            self._link = None

    def gated(self) -> bool:
        """Whether this worker's calls are bracketed from the host (see `link`): on the CPU,
        and a calibration worker made so (the CPU's)."""
        return self.device.type != "cuda" or self._gated

    def finished(self) -> dict:
        """The second frame of a GPU call: the child's word that its call's work ended (and
        its own time for it); on the GPU the child sends it once it synchronized."""
        reply = self._receive(time.monotonic() + self.call_timeout, "call")
        if "error" in reply:
            self._end()
            raise WorkerLost(f"CUDA context lost: {_text(reply['error'])}", self)
        return reply

    def _start(self) -> None:
        """The child prestarted for this kernel (benches/worker_start.py), else a new one."""
        args = (self.kernel.model_dump_json(), str(self.tree), str(self.device), self.flush_l2)
        name = f"bench-worker-{self.kernel.identity}"
        if self.confined:
            started = worker_start.adopt(args) or worker_start.start(args, name)
        else:
            unconfined = {
                k: v for k, v in os.environ.items() if k not in confinement.WORKER_SETTINGS
            }
            started = worker_start.start(args, name, unconfined)
        self._process, self._conn = started
        self.generation += 1
        reply = self._receive(time.monotonic() + START_TIMEOUT_SECONDS, "start")
        if reply.get("state") != wire.READY:
            self._end()
            raise WorkerLost(_text(reply.get("error", "worker did not start")), self)

    def _receive(self, deadline: float, op: str) -> dict:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            if self._conn.poll(remaining):
                return wire.read_reply(self._conn)
        except (EOFError, OSError):
            raise WorkerLost(self._death(op), self) from None
        except ValueError as exc:
            self._end()
            raise WorkerLost(f"broke the protocol ({op}): {_text(exc)}", self) from None
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

    def close_after_refusal(self) -> None:
        """Ends a child whose answer mid-call was refused: whatever it still has to say of
        that call is not read, and must not be taken for the next request's reply."""
        self._end()

    def hung(self, op: str) -> WorkerLost:
        """Ends a child whose call outlasted its bound, and says so."""
        self._end()
        return WorkerLost(
            f"hung: '{op}' did not finish in {self.call_timeout:g} s (call_timeout)", self
        )

    def _end(self) -> None:
        """Kill the child (if alive) and forget it; the next request starts another."""
        if self._in_flight is not None:
            self._in_flight.outcome = WorkerLost("the worker was ended", self)
            self._in_flight = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=10)
            if self.confined:  # what the worker left running as its tree's user
                confinement.end_kernel_processes(str(self.tree))
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None
        self._unlink()
        if self.lender.outputs is not None:
            self.lender.outputs.close()  # the dead child's memory
        self._free_returned()

    def close(self) -> None:
        self._end()
        self.lender.close()


@dataclass
class Pending:
    """A request sent, its reply (or the exception reading it raised) not yet taken."""

    worker: Worker
    op: str
    deadline: float  # the request's time bound runs from its sending
    outcome: dict | Exception | None = None

    def reply(self) -> dict:
        if self.outcome is None:  # still in flight: every other request settled it
            self.worker.settle()
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@dataclass
class _Asked:
    """A timed call asked of a worker (bracket.Asked): its reply read when it has come."""

    worker: Worker
    pending: Pending

    def within(self, seconds: float) -> bool:
        return self.pending.outcome is not None or self.worker.answered(seconds)

    def reply(self) -> dict:
        try:
            return self.pending.reply()
        except RequestFailed as exc:
            raise WorkerLost(f"raised while timed: {exc}", self.worker) from None


def _text(value) -> str:
    """One line, bounded: the child's words reach CSV rows and the run's log."""
    return " ".join(str(value).split())[:300]


@dataclass
class Measuring:
    """What a worker's placement needs of the timing loop: the parent's bracket, what a
    bracket adds (`brackets.Calibration`; by whether it is gated from the host), the
    gate's tolerance for the rows it reads (None: the calibration call itself, unchecked)
    and the run's secret, mixed into the fresh queries' seeds so that no file of the run
    predicts them."""

    bracket: object
    overhead_ms: Callable[[bool], float]  # (gated from the host) -> ms
    tolerance: float | None
    secret: int
    mode: str | None = None  # the placement's own mode and calls (a CPU batch), if any
    calls: int | None = None
    # (gated from the host) -> None: what a bracket adds measured again, never above before
    recalibrate: Callable[[bool], None] = lambda gated: None
    # (gated from the host) -> None: one bracket of the known call between the kernel's
    # samples (CPU: brackets.Calibration.between); None where a bracket is not read so
    between: Callable[[bool], None] | None = None
    # (gated from the host) -> ms a call: what the worker's own events add to a call over
    # the same call in the parent's process (brackets.Calibration.own_offset_ms)
    own_offset_ms: Callable[[bool], float] = lambda gated: 0.0


@dataclass
class _Figures:
    """The harness's times of a config's calls and the worker's own, as they came, and
    for each sample with both how far the harness's lay over the worker's (the GPU's rule)."""

    measured: list[float] = field(default_factory=list)
    own: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    # CPU: the harness's times less the host's load inside each bracket (host_load.py)
    unloaded: list[float] = field(default_factory=list)
    looked_again: bool = False  # GPU: the rule's second look taken (`_look_again`)

    def clear(self) -> None:
        for figures in (self.measured, self.own, self.gaps, self.unloaded):
            figures.clear()


class MeasuredPlacement:
    """A placement of a worker's kernel, timed by the parent: the inputs are the parent's,
    lent; each `sample` writes fresh queries, brackets one call (graph mode: one replay of
    `calls` calls) and reads rows of its output where it lies, checked a batch at a time
    (`confirm`). The Placement interface the timing loop uses: sample, drop; `confirm` and
    `checked` stand in for last_output (every call checked, once confirmed)."""

    _count = 0

    def __init__(
        self,
        remote: RemoteImplementation,
        config: AttentionConfig,
        inputs: tuple,
        mode: str,
        calls: int,
        rng_seed: int,
        measuring: Measuring,
        copies: int | None = None,
    ) -> None:
        MeasuredPlacement._count += 1
        if measuring.mode is not None:
            mode, calls = measuring.mode, measuring.calls
        self.mode, self.calls = mode, calls  # the sample's rows say them (runner)
        worker = self._worker = remote.worker
        self._config, self._measuring = config, measuring
        self._key = f"p{MeasuredPlacement._count}"
        self._rng = np.random.default_rng(rng_seed ^ measuring.secret)
        q, self._k, self._v = inputs  # the parent's own: the reference reads these
        self._descales = descales_of(inputs)  # FP8: q's quantizes each sample's fresh queries
        self._scales = (  # and the reference reads the rows as the values they stand for
            tuple(float(self._descales[name]) for name in DESCALE_NAMES) if self._descales else None
        )
        if copies is None:  # a query buffer per call: no call can reuse another's answer
            copies = calls if mode != "single" else 1
        lend = worker.lender.lend
        self._queries = worker.lender.lend_copies(q, copies)
        self._lent_kv = [lend(self._k), lend(self._v)]
        self._lent_descales = _lend_descales(lend, inputs)
        cpu = worker.device.type != "cuda"
        self._slots = [lend(_output_slot(config, q)) for _ in range(copies)] if cpu else []
        self._out_dtype = output_dtype(config)
        # The sample's queries, in the parent's own memory: one buffer a copy, stacked, so
        # that a sample's check reads any picked call's rows in one go (row_checks.reference)
        self._fresh_stacked = torch.empty((copies, *q.shape), dtype=q.dtype, device=q.device)
        self._fresh = list(self._fresh_stacked.unbind(0))
        self._outputs: list[cuda_ipc.Descriptor] | None = None
        # the samples' rows read, checked in batches (`confirm`)
        self._unchecked = row_checks.Unchecked(self._k.shape[-2] * self._k.shape[-1])
        # A config's figures run across its placements, the warm-up's and its blocks' (a
        # block may hold fewer samples than the check needs).
        self._figures = worker.figures(config.name, measuring.mode or mode)
        self.worst_error: float | None = None
        self.samples = 0
        self.reported: float | None = None  # the worker's own time for the latest call
        self.harness: float | None = None  # the harness's, less what a bracket adds
        # Not waited for here: the child builds it while the parent builds its own
        # (placement.build); the first use takes the reply (`_ready`).
        self._placing: Pending | None = worker.send(
            "place",
            key=self._key,
            config=config.model_dump(mode="json"),
            mode=mode,
            calls=calls,
            queries=[lent.descriptor for lent in self._queries],
            k=self._lent_kv[0].descriptor,
            v=self._lent_kv[1].descriptor,
            descales={name: lent.descriptor for name, lent in self._lent_descales.items()},
            slots=[lent.descriptor for lent in self._slots],
        )
        self._generation = worker.generation

    def sample(self) -> float:
        """The time of one call (ms), its output read where the harness read it (checked
        by `confirm`). On the CPU the harness's bracket less what a bracket adds (a sample
        that leaves no time, noise, is taken again); on the GPU the worker's own events,
        bounded by the harness's whole bracket and checked against it
        (GPU_REPORT_ALLOWANCE_MS says why), less what a worker's own events add
        (brackets.Calibration.own_offset_ms). A refusal names a wrong row read before it
        first: garbage answered at once also takes no time, and its refusal read so (two
        cheats of the GPU suite, H200, 2026-11-30)."""
        try:
            return self._sample()
        except Refused:
            self.confirm()
            raise

    def _sample(self) -> float:
        for _ in range(NONPOSITIVE_RETAKES + 1):
            whole, self.harness, self.reported, unloaded = self._take()
            reported = self._reported_within(whole)
            if self._on_gpu():
                value = reported - self._measuring.own_offset_ms(self._worker.gated())
            else:
                value = self.harness
            if value > 0:
                self._compare(self.harness, self.reported, unloaded)
                return value
            if not self._on_gpu():
                # A call's bracket shorter than what a bracket adds: that was measured in a
                # loaded spell (an honest kernel read -0.04 ms a call, two suites at once on
                # 2 cores, and was refused). Measured again before the sample is taken
                # again. (On the GPU the value is the worker's report: nothing to measure.)
                self._measuring.recalibrate(self._worker.gated())
        raise Refused(
            f"its calls took no time by the harness's clock ({self.harness:.4g} ms less what "
            "a bracket adds): too short to time this way, on this machine",
            self._worker,
        )

    def warm(self) -> None:
        """One untimed call (a block's first warm rounds, runner._Block.settle): nothing of
        it becomes a sample, so it is neither bracketed nor checked; the worker calls on the
        queries its buffers hold and the parent waits for the work to end. (Bracketed and
        checked, each cost our kernel's block 4-9 ms on an H200: issue 48 item 6.)"""
        self._ready()
        worker = self._worker
        worker.settle()
        link = worker.link()
        fields = {"key": self._key}
        if link is not None:  # a value the parent's stream has been given already: no wait
            fields["go"] = link.go.released
        try:
            reply = worker.request("call", **fields)
            if self.mode != "graph" and not self._slots:
                self._output(reply, 0)  # its output mapped now, not inside a later bracket
        except RequestFailed as exc:
            raise WorkerLost(f"raised while warmed: {exc}", worker) from None
        except Refused:
            worker.close_after_refusal()
            raise
        if self._on_gpu():
            worker.finished()

    def bracketed(self) -> tuple[float, float | None]:
        """The harness's whole bracket of one call, nothing subtracted, and the worker's own
        time for it, None where it reported none (the calibration's, on the GPU)."""
        whole, _, own, _ = self._take()
        return whole * self.calls, None if own is None else own * self.calls

    def bracketed_gap(self) -> float:
        """The harness's whole bracket of one call less the worker's own time for it and
        the time the parent and the worker sat runnable but not running inside it (the
        host's load, host_load.LoadWindow): the calibration's on the CPU, whose worker and
        known call are the harness's own. Without the load, a kernel that loads the host
        between its own calls would swell what is taken off its samples."""
        # `unloaded` is the whole bracket less the load: the calibration's own placement
        # has nothing taken off its brackets.
        _, _, own, unloaded = self._take()
        if own is None:
            raise RuntimeError("the calibration's worker reported no time of its own")
        return (unloaded - own) * self.calls

    @property
    def calibrates_between(self) -> bool:
        """Whether the round takes a bracket of the known call for this placement too
        (`calibrate_between`, at a place of its own in the round's order)."""
        return self._measuring.between is not None

    def calibrate_between(self) -> None:
        self._measuring.between(self._worker.gated())

    def _on_gpu(self) -> bool:
        return self._worker.device.type == "cuda"

    def _reported_within(self, whole: float) -> float | None:
        """The worker's own time for the call, which the harness's whole bracket holds (a
        report longer than that is impossible: a lie); on the GPU, where it is the
        sample, it must be there."""
        own = self.reported
        if own is None:
            if self._on_gpu():
                raise Refused("reported no time of its own for a GPU call", self._worker)
            return None
        if own > whole:
            raise Refused(
                f"its process reported {own:.4g} ms a call, more than the harness's whole "
                f"bracket of {whole:.4g} ms",
                self._worker,
            )
        return own

    def _take(self) -> tuple[float, float, float | None, float]:
        """(the whole bracket per call, the harness's time per call less what a bracket
        adds, the worker's own time per call or None, the harness's time less the host's
        load too: CPU only, else the harness's) of one bracketed, checked call."""
        self._ready()
        worker = self._worker
        worker.settle()  # a reply still in flight is not this call's
        link = worker.link()
        seed = int(self._rng.integers(2**63))
        # the sample's queries, in the parent's own memory
        fill_fresh(self._fresh, seed, self._descales.get("q_descale"))
        picks = self._picks()
        for slot in self._slots:
            slot.tensor.fill_(float("nan"))

        def refresh() -> None:
            """Inside the bracket, before the call can start (GPU: before the go; CPU:
            before the call is asked for): the parent writes the queries into the lent
            buffers, so that no work on them can start before the clock does. On the CPU a
            copy is what the bracket holds of the queries: the worker's own draw from a seed
            took 0.5-3.5 ms a sample at 1-2 x 8 x 512 x 64 on this 2-core host, varying from
            one draw to the next and between the kernel's worker and the calibration's, and
            read the worker's calls 2-14 % slower than the parent's (issue 49 item 4;
            tools/verdict/README.md)."""
            # One grouped copy: a copy a query is 256 launches in a graph sample.
            torch._foreach_copy_([lent.tensor for lent in self._queries], self._fresh)

        def ask(go: int | None) -> _Asked:
            """The call asked for; on the GPU it waits for the go counter to reach `go`."""
            fields = {"key": self._key}
            if go is not None:
                fields["go"] = go
            return _Asked(worker, worker.send("call", **fields))

        def deadline() -> float:
            return time.monotonic() + worker.call_timeout

        def finish(reply: dict) -> dict:
            """The call's last word: on the GPU its second frame, read once its work ended."""
            return worker.finished() if worker.device.type == "cuda" else reply

        try:
            taken = self._measuring.bracket.sample(
                link,
                refresh,
                ask,
                lambda reply: self._read(reply, picks),
                deadline,
                finish,
                load=None if self._on_gpu() else host_load.LoadWindow(worker.pid()),
            )
        except brackets.Hung:
            raise worker.hung("call") from None
        except Refused:
            worker.close_after_refusal()
            raise
        self.samples += 1
        self._keep(picks, taken.rows)
        ms = (taken.ms - self._measuring.overhead_ms(link is None)) / self.calls
        own = taken.reply.get("own_ms")
        valid = isinstance(own, (int, float)) and math.isfinite(own) and own > 0
        unloaded = ms - (taken.waited_ms or 0.0) / self.calls
        return taken.ms / self.calls, ms, float(own) if valid else None, unloaded

    def _picks(self) -> tuple[tuple[int, ...], row_checks.Rows]:
        """(calls, rows) to check: in graph mode the last call and GRAPH_OUTPUTS_CHECKED
        others drawn now (as many reads whatever the calls, so that the calibration's
        bracket reads as much)."""
        calls = [self.calls - 1]
        if self.mode != "single":
            calls += [int(i) for i in self._rng.integers(0, self.calls, GRAPH_OUTPUTS_CHECKED)]
        shape = tuple(self._fresh[0].shape)
        return tuple(calls), row_checks.pick(shape, self._rng, self._worker.device, tuple(calls))

    def _read(self, reply: dict, picks) -> Callable[[], list[torch.Tensor]]:
        """What reads the picked rows of each picked call's output where it lies (its
        memory found, and mapped if new, now)."""
        calls, rows = picks
        return row_checks.gatherer([self._output(reply, i) for i in calls], rows)

    def _output(self, reply: dict, call: int) -> torch.Tensor:
        if self._slots:
            return self._slots[call].tensor
        if self.mode == "graph":
            descriptor = self._outputs[call]
        else:
            try:
                descriptor = cuda_ipc.Descriptor.from_json(reply["outputs"][0])
            except (KeyError, IndexError, TypeError, cuda_ipc.IpcError) as exc:
                raise Refused(f"said nothing of its output: {_text(exc)}", self._worker) from None
        return self._view(descriptor)

    def _view(self, descriptor: cuda_ipc.Descriptor) -> torch.Tensor:
        expected = tuple(self._fresh[0].shape)
        if descriptor.shape != expected or descriptor.dtype != self._out_dtype:
            raise Refused(
                f"returned {descriptor.dtype} of shape {list(descriptor.shape)}, "
                f"expected {self._out_dtype} of {list(expected)}",
                self._worker,
            )
        try:
            return self._worker.lender.outputs.tensor(descriptor)
        except cuda_ipc.IpcError as exc:
            raise Refused(f"its output could not be read: {_text(exc)}", self._worker) from None

    def _keep(self, picks, gathered: list[torch.Tensor]) -> None:
        """The sample's rows read kept for `confirm`, with the queries they need (gathered
        now: the next sample overwrites the buffers); confirmed now if the batch is full."""
        if self._measuring.tolerance is None:
            return
        calls, rows = picks
        q_rows = row_checks.query_rows(self._fresh_stacked, rows)
        self._unchecked.add(self.samples, calls, rows, q_rows, gathered)
        if self._unchecked.full:
            self.confirm()

    def confirm(self) -> None:
        """Every sample's rows read so far checked against the reference: Refused, naming
        the first sample whose rows fail (and the input the kernel modified, if it did).
        The runner confirms a block's samples before its timed checks and its end, a
        throwaway placement's before its warm-up's figures are used (benches/runner.py)."""
        tolerance = self._measuring.tolerance
        if tolerance is None or not self._unchecked:
            return
        verdicts = self._unchecked.verdicts(
            self._k, self._v, self._config.causal, self._fresh[0].shape[1], tolerance,
            self._scales,
        )  # fmt: skip
        for verdict in verdicts:
            error = verdict.error
            self.worst_error = error if self.worst_error is None else max(self.worst_error, error)
        failed = next((verdict for verdict in verdicts if verdict.problem), None)
        if failed is not None:
            changed = self._modified_input()
            raise Refused(f"sample {failed.sample}: {changed or failed.problem}", self._worker)

    def _modified_input(self) -> str | None:
        """Which input the kernel's calls changed, if any: k and v as lent for the whole
        placement; q as the latest sample left each of its buffers."""
        lent_k, lent_v = (lent.tensor for lent in self._lent_kv)
        for lent, fresh in zip(self._queries, self._fresh, strict=True):
            changed = modified_input((lent.tensor, lent_k, lent_v), (fresh, self._k, self._v))
            if changed:
                return changed
        return None

    def _compare(self, measured: float, own: float | None, unloaded: float) -> None:
        """The worker's own time against the harness's, once OWN_TIME_MIN_SAMPLES samples
        have both: too short a report is a lie (a longer one than the whole bracket is
        refused at once, `_reported_within`). A loaded machine only ever lengthens the
        harness's figure, so the CPU's rule reads its fastest sample less the host's load
        inside it (`unloaded`: host_load.py); on the GPU the rule of
        GPU_REPORT_ALLOWANCE_MS."""
        figures = self._figures
        figures.measured.append(measured)
        figures.unloaded.append(unloaded)
        if own is None or self._measuring.tolerance is None:
            return
        figures.own.append(own)
        figures.gaps.append(measured - own)
        on_gpu = self._on_gpu()
        paired = len(figures.own)
        if paired < OWN_TIME_MIN_SAMPLES:
            return
        theirs, ours = statistics.median(figures.own), statistics.median(figures.measured)
        if on_gpu:
            allowance = GPU_REPORT_ALLOWANCE_MS[self.mode]
            below = statistics.median(figures.gaps) > (
                allowance / self.calls + GPU_REPORT_ALLOWANCE_FRACTION * ours
            )
        else:
            fastest = min(figures.unloaded)
            below = theirs < fastest * CPU_OWN_FRACTION - CPU_OWN_FLOOR_MS
        if below and on_gpu and not figures.looked_again:
            self._look_again()
            return
        if below:
            unloaded = "" if on_gpu else f", {fastest:.4g} ms less the host's load"
            samples = (
                f"{paired} fresh samples after a first look read the same"
                if on_gpu
                else f"{paired} samples"
            )
            raise Refused(
                f"its process reported {theirs:.4g} ms a call where the harness measured "
                f"{ours:.4g} ms (at least {min(figures.measured):.4g} ms{unloaded}; "
                f"{samples})",
                self._worker,
            )

    def _look_again(self) -> None:
        """GPU: the rule's second look, before a refusal. Its figures are dropped and
        OWN_TIME_MIN_SAMPLES more bracketed calls (checks only: no sample of the run's) are
        judged alone, the calibration measured afresh: a kernel that lies is refused at the
        same sample, a few brackets later; an honest one whose first samples' brackets held
        something else is not. (The cheat suite's honest kernel was refused in 5 of 11 GPU
        runs over four sessions, the harness's median 1.5-6x its own events on its first
        five samples, likely while the cheats beside it were refused and their workers
        ended; H200, 2026-11-29.)"""
        figures = self._figures
        figures.clear()
        figures.looked_again = True
        self._measuring.bracket.looked_again += 1
        self._measuring.recalibrate(self._worker.gated())
        for _ in range(OWN_TIME_MIN_SAMPLES):
            whole, self.harness, self.reported, unloaded = self._take()
            self._compare(self.harness, self._reported_within(whole), unloaded)

    def own_fastest_ms(self) -> float | None:
        """The fastest of the worker's own times so far (what sizes its CPU batches): a
        warm-up of a few calls is mostly cold ones, whose median sized an SDPA of 0.1 ms a
        call at one call a sample, each carrying the pipe's ~3 ms (issue 49 item 4)."""
        return min(self._figures.own) if self._figures.own else None

    def checked(self) -> tuple[int, float | None]:
        """(samples taken, the worst max error among their rows): every one checked once
        `confirm` has run since the latest."""
        return self.samples, self.worst_error

    def _ready(self) -> None:
        """The placement built (the child's reply to `place` is taken at the first use), in
        the child that built it."""
        placing, self._placing = self._placing, None
        if placing is not None:
            try:
                reply = placing.reply()
            except RequestFailed as exc:
                raise WorkerLost(f"raised while timed: {exc}", self._worker) from None
            if self.mode == "graph":
                self._outputs = self._graph_outputs(reply)
        if self._worker.generation != self._generation:
            raise WorkerLost("the worker holding this placement was restarted", self._worker)

    def _graph_outputs(self, reply: dict) -> list[cuda_ipc.Descriptor]:
        try:
            outputs = [cuda_ipc.Descriptor.from_json(d) for d in reply["outputs"]]
        except (KeyError, TypeError, cuda_ipc.IpcError) as exc:
            raise Refused(f"said nothing of its outputs: {_text(exc)}", self._worker) from None
        if len(outputs) != self.calls:
            raise Refused(f"described {len(outputs)} outputs of {self.calls} calls", self._worker)
        for descriptor in outputs:
            self._view(descriptor)  # refused now if it lies about one
        return outputs

    def drop(self) -> None:
        """Not waited for: the child frees it while the parent frees its own; the lent
        buffers are freed once the child has answered."""
        lent = [*self._queries, *self._lent_kv, *self._lent_descales.values(), *self._slots]
        self._queries, self._lent_kv, self._slots, self._lent_descales = [], [], [], {}
        if self._worker.generation == self._generation:
            self._worker.send("drop", key=self._key)
        self._worker.free_later(lent)


@dataclass(frozen=True)
class RemoteImplementation(UserImplementation):
    """A user's kernel in its own child process (see the module docstring): `run` is not
    callable here; the gate and the timing loop use `gate`, `probe` and `place`."""

    worker: Worker | None = None

    def gate(self, config: AttentionConfig, inputs: tuple):
        """correctness.TwoCalls or CallProblem of two calls on `inputs`, lent to the worker:
        the outputs are read from slots of the parent's, the inputs compared with the
        parent's own afterwards."""
        worker = self.worker
        lend = worker.lender.lend
        lent = [lend(t) for t in inputs]
        descales = _lend_descales(lend, inputs)
        slots = [lend(_output_slot(config, inputs[0])) for _ in range(2)]
        try:
            reply = worker.request(
                "gate",
                config=config.model_dump(mode="json"),
                inputs=[x.descriptor for x in lent],
                descales={name: x.descriptor for name, x in descales.items()},
                slots=[x.descriptor for x in slots],
            )
            backend = _text(reply.get("backend", "unknown"))
            if "problem" in reply:
                return CallProblem(backend, _text(reply["problem"]))
            changed = modified_input(tuple(x.tensor for x in lent), inputs)
            if changed:
                return CallProblem(backend, changed)
            return TwoCalls(backend, *(x.tensor.clone() for x in slots))
        except (WorkerLost, RequestFailed) as exc:
            return CallProblem("error", str(exc))
        finally:
            worker.free_later([*lent, *descales.values(), *slots])

    def probe(self, config: AttentionConfig, capture_inputs: tuple, replay_inputs: tuple):
        """The graph probe's output (replayed on `replay_inputs`), or why there is none."""
        worker = self.worker
        lend = worker.lender.lend
        capture, replay = [lend(t) for t in capture_inputs], [lend(t) for t in replay_inputs]
        scales = _lend_descales(lend, capture_inputs), _lend_descales(lend, replay_inputs)
        slot = lend(_output_slot(config, replay_inputs[0]))
        try:
            reply = worker.request(
                "probe",
                config=config.model_dump(mode="json"),
                capture=[x.descriptor for x in capture],
                replay=[x.descriptor for x in replay],
                capture_descales={name: x.descriptor for name, x in scales[0].items()},
                replay_descales={name: x.descriptor for name, x in scales[1].items()},
                slot=slot.descriptor,
            )
            return _text(reply["problem"]) if "problem" in reply else slot.tensor.clone()
        except (WorkerLost, RequestFailed) as exc:
            return str(exc)
        finally:
            lent = [*capture, *replay, *scales[0].values(), *scales[1].values(), slot]
            worker.free_later(lent)

    def place(self, config, inputs, mode, calls, rng_seed, measuring) -> MeasuredPlacement:
        return MeasuredPlacement(self, config, inputs, mode, calls, rng_seed, measuring)


def _lend_descales(lend, inputs) -> dict:
    """FP8 inputs' descales lent beside them, by keyword (none for other inputs)."""
    return {name: lend(value) for name, value in descales_of(inputs).items()}


def _output_slot(config: AttentionConfig, q: torch.Tensor) -> torch.Tensor:
    """A NaN buffer of the output's shape and dtype (bfloat16 for FP8 inputs)."""
    return torch.full(q.shape, float("nan"), dtype=output_dtype(config), device=q.device)


def remote_implementation(
    kernel: UserKernel, tree: Path, device: torch.device, flush_l2: bool
) -> RemoteImplementation:
    """The kernel's registry entry: availability and support asked of its worker (the
    declared limits first, without starting one)."""
    child = Worker(kernel, tree, device, flush_l2)
    supports = kernel.contract.supports

    def ask(op: str, **fields) -> str | None:
        try:
            reply = child.request(op, **fields)
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


# The calibration call's kernel, in a worker of the harness's own (benches/calibration_kernel.py).
CALIBRATION_KERNEL = UserKernel(
    identity="bench-calibration",
    directory="benches",  # unused: its worker is given the payload root itself
    contract=KernelContract(
        name="bench-calibration",
        entry="benches.calibration_kernel:attention",
        supports={
            "devices": ["cpu", "cuda"],
            "dtypes": ["float16", "bfloat16", "float32", "float64"],
        },
    ),
    source=KernelIdentity(tree_sha256="0" * 64),
)


def calibration_worker(device: torch.device, flush_l2: bool, gated: bool) -> Worker:
    """A worker of the harness's own running the calibration call: what `brackets.Calibration`
    measures a bracket with (`gated`: brackets gated from the host)."""
    root = worker_start.payload_root()
    return Worker(CALIBRATION_KERNEL, root, device, flush_l2, confined=False, gated=gated)


class CalibrationSamples:
    """What `brackets.Calibration` calls: (config, mode, copies) -> brackets.KnownSamples
    (the known call's bracketed samples; GPU only, the same call's samples in this process
    by the parent's clock and its own time in its worker), warm-up samples left out. The
    known call's placement of `copies` lent query buffers is kept while its config is
    timed: a block's calibration (taken at every block, the bracket's cost drifting
    between blocks) then pays no placement and no warm-up, and takes
    CALIBRATION_SAMPLES_KEPT samples where a fresh placement takes CALIBRATION_SAMPLES
    after CALIBRATION_WARMUP (the first sample of each block held 40-137 ms of
    calibration, 10.8 s a run of the default plan on an H200, 2026-11-29).

    The samples in this process are taken once for a kept placement, at its first block:
    they are the parent's own call on the same inputs, with no worker and no handshake in
    them, so they do not drift with the bracket as the bracketed ones do. (On an H200 our
    kernel's first sample of a single-launch block came a median 29 ms after the row before
    it, against 2.3 ms before the harness; five in-process samples of about 1.1 ms each were
    part of it. 2026-11-29.)"""

    def __init__(self, worker: Worker, bracket, secret: int) -> None:
        self._worker, self._bracket, self._secret = worker, bracket, secret
        self._held: dict[tuple, tuple[MeasuredPlacement, tuple]] = {}
        self._in_process: dict[tuple, list[float]] = {}  # per kept placement, as _held

    def __call__(
        self, config: AttentionConfig, mode: str, copies: int, count: int | None = None
    ) -> brackets.KnownSamples:
        """`count`: that many samples, no warm-up, on a kept placement (the CPU's brackets
        between a kernel's samples, `brackets.Calibration.between`)."""
        from benches.calibration_kernel import attention as known

        key = (config.name, mode, copies)
        if key in self._held:
            held, inputs = self._held[key]
            warmup, count = (1, brackets.CALIBRATION_SAMPLES_KEPT) if count is None else (0, count)
        else:
            self._drop(lambda name: name != config.name)  # configs are timed one at a time
            held, inputs = self._place(config, mode, copies)
            self._held[key] = held, inputs
            warmup, count = brackets.CALIBRATION_WARMUP, brackets.CALIBRATION_SAMPLES
        if self._worker.device.type != "cuda":
            return brackets.KnownSamples(
                [held.bracketed_gap() for _ in range(warmup + count)][warmup:]
            )
        bracketed = [held.bracketed() for _ in range(warmup + count)][warmup:]
        if key not in self._in_process:
            q, k, v = inputs
            scale = q.shape[-1] ** -0.5

            def call():
                return known(q, k, v, causal=config.causal, scale=scale)

            clock = self._bracket.clock
            taken = brackets.CALIBRATION_WARMUP + brackets.CALIBRATION_SAMPLES
            self._in_process[key] = [clock.time_call(call) for _ in range(taken)][
                brackets.CALIBRATION_WARMUP :
            ]
        return brackets.KnownSamples(
            [whole for whole, _ in bracketed],
            self._in_process[key],
            [own for _, own in bracketed if own is not None],
        )

    def _place(self, config: AttentionConfig, mode: str, copies: int) -> tuple:
        from benches.correctness import make_inputs

        worker = self._worker
        if is_fp8(config.dtype):  # the known call is SDPA, which takes no e4m3: the shape's
            config = config.model_copy(update={"dtype": "bfloat16"})  # bracket in bf16
        inputs = make_inputs(config, worker.device, self._secret % 2**63)
        remote = RemoteImplementation(
            "bench-calibration", _runs_in_worker, lambda *a: "known", lambda d: None, worker=worker
        )
        measuring = Measuring(self._bracket, lambda gated: 0.0, None, self._secret)
        # On the GPU one known call whatever the copies (what is measured is the bracket, not
        # calls); on the CPU as many calls as the real ones, each copying its output out as
        # theirs do (their own time is taken off: CalibrationSamples).
        calls = copies if worker.device.type == "cpu" else 1
        secret = self._secret
        held = MeasuredPlacement(remote, config, inputs, mode, calls, secret, measuring, copies)
        return held, inputs

    def _drop(self, which: Callable[[str], bool]) -> None:
        for key in [key for key in self._held if which(key[0])]:
            held, _ = self._held.pop(key)
            self._in_process.pop(key, None)
            held.drop()

    def close(self) -> None:
        """Drops every kept placement (before the worker is closed)."""
        self._drop(lambda name: True)
