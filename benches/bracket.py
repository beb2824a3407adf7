"""The harness's own clock around a call made in a kernel's worker process.

The code under test may patch anything in its own process, timers included, so no time
read there becomes a sample. The parent brackets each call instead:

GPU. The parent asks the worker for the call with the next value of its go counter (a
32-bit counter in the parent's memory, lent to the worker: shared_buffers.GoCounter). The
worker enqueues a wait until the counter reaches that value, the call, and a write of the
value into the parent's done counter (shared_buffers.DoneCounter), and replies where its
output lies. Only then does the parent's stream take its start event, the fresh queries
written into the worker's input buffers, the L2 flush, the go counter's new value, a wait
for the done counter to reach it, the read of the sampled rows of the output, and its end
event. No host wait or poll lies inside the bracket: the handshake lies before the start
event, however long it takes, and the GPU itself goes from the worker's end to the rows.
The rows are read after the call's work is done or they are wrong: the end event cannot
come before the work (benches/row_checks.py). A worker that dies or hangs mid-call would
leave the parent's stream waiting (as an event of the worker's did, H200, 2026-11-29): the
parent then writes the done counter itself, from a stream of its own. Counters are memory,
which crosses users where an interprocess event does not: a worker confined as its tree's
user is bracketed the same way.

CPU: gated from the host. The parent starts its clock, writes the sample's fresh queries
into the lent buffers, then asks for the call: nothing can start on them before the clock
does. Then the worker's word that the work is over, the rows read, the end of the clock.

Either way the bracket holds more than the call: the context switch to the worker and
back (about 0.33 ms on an H200), the refresh, the flush, the waits, the row reads, the
pipe. A worker of the harness's own runs a known call, SDPA (`benches/calibration_kernel.py`),
bracketed the same way. On the GPU the parent also times it in its own process, at each
block's start: the two medians' difference is what a bracket adds. On the CPU its worker's
own clock is the harness's too: what a bracket adds is the median of its brackets less its
own time (and the host's load), taken one a round between the kernel's samples
(`Calibration.between`), where the processes have slept and the caches been stirred as
before the kernel's. What is left, less that, is the call.

On the GPU the sample is the worker's own events' time (isolation.py says why), which reads
a call a little longer than the same call timed in the parent's process: the known call's
own time in its worker less its time in the parent is taken off it too
(`Calibration.own_offset_ms`).
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from benches import timing

# A worker's reply to a linked call comes once the call is enqueued behind the wait on the
# go counter, before anything is timed. A worker that synchronizes inside its call before
# it replies (a kernel's own sync; the driver loading a kernel at its first launch may
# synchronize the context: CUDA Programming Guide, "Lazy Loading", Potential Hazards,
# https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html)
# cannot reply before the go it waits for: the harness's own calibration worker hung so at
# its first timed call in the first GPU run of this bracket (H200, 2026-11-30). So the
# parent waits for the reply at most REPLY_FACTOR x the median of the link's latest
# REPLY_HISTORY replies, within these bounds, then starts its bracket and releases the call
# anyway; such a sample holds the worker's host time and is taken again, at most
# RETAKES_MAX times.
REPLY_WAIT_US = 1000.0
REPLY_WAIT_MAX_US = 20000.0
REPLY_FACTOR = 2.0
REPLY_HISTORY = 16
RETAKES_MAX = 3


class Hung(Exception):
    """The worker's call did not finish by the request's deadline."""


class Asked(Protocol):
    """A call asked of a worker, its reply not yet read."""

    def within(self, seconds: float) -> bool:
        """Whether the reply has come, waiting at most `seconds` for it."""
        ...

    def reply(self) -> dict: ...


@dataclass(frozen=True)
class Bracketed:
    """One bracketed call: the parent's time (ms, overhead included), the rows it read,
    the worker's reply, and whether the reply came late (then the time also holds the
    worker's host time)."""

    ms: float
    rows: torch.Tensor
    reply: dict
    late: bool = False
    # CPU: how long the parent's thread and the worker's main thread sat runnable but not
    # running inside the bracket (benches/host_load.py), None where unread
    waited_ms: float | None = None


class CudaBracket:
    """The parent's events around a worker's call; one per parent, used for every worker
    (`link`: the worker's go and done counters)."""

    interleaves = False  # the GPU's calibration is taken afresh at each block's start

    def __init__(self, clock: timing.CudaClock) -> None:
        self.clock = clock
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self.retaken = 0
        self.looked_again = 0  # the own-time rule's second looks (isolation._look_again)

    @staticmethod
    def overhead_of(bracketed: list[float], in_process: list[float]) -> float:
        """The known call's median bracket less its median time in the parent's own
        process (each spreads about 1 us either side on an H200, 2026-11-29)."""
        return statistics.median(bracketed) - statistics.median(in_process)

    def sample(
        self,
        link,
        refresh: Callable[[], None],
        ask: Callable[[int | None], Asked],
        read: Callable[[dict], Callable[[], torch.Tensor]],
        deadline: Callable[[], float],
        finish: Callable[[dict], dict],
        load=None,
    ) -> Bracketed:
        """`refresh` writes the call's fresh inputs, `ask(go)` asks the worker for the call
        (linked: to start once the go counter reaches `go`), `read` finds where the reply
        says the output is and returns what reads the rows there, once the call is done;
        `deadline()` is when the worker must have finished (monotonic seconds); `finish`
        takes the worker's last word on the call once the bracket is closed (every call's,
        a retaken one's too), and its answer stands as the sample's reply. `load` is the
        CPU's (CpuBracket): the GPU's events hold no host wait."""
        for _ in range(RETAKES_MAX):
            taken = self._linked(link, refresh, ask, read, deadline, finish)
            if not taken.late:
                return taken
            self.retaken += 1
        return self._linked(link, refresh, ask, read, deadline, finish)

    @staticmethod
    def reply_wait_us(link) -> float:
        """How long the parent waits for a linked call's reply (see REPLY_FACTOR)."""
        if not link.replies:
            return REPLY_WAIT_US
        wait = REPLY_FACTOR * statistics.median(link.replies)
        return min(REPLY_WAIT_MAX_US, max(REPLY_WAIT_US, wait))

    def _linked(self, link, refresh, ask, read, deadline, finish) -> Bracketed:
        # The call is asked for, and enqueued by the worker behind its wait on the go
        # counter, before anything is timed: the host's handshake lies before the start
        # event. (A spin before the start event covered it before, twice the recent
        # handshakes' median: 1.5 ms a sample on an H200, 2026-11-30.) Where the output
        # lies is found before the start too (a new allocation is mapped: the driver's IPC
        # open takes a while); its rows are read once the call is done.
        go = link.go.arm()
        asked_at = time.perf_counter()
        try:
            asked = ask(go)
            on_time = asked.within(self.reply_wait_us(link) * 1e-6)
            if on_time:
                link.replies.append((time.perf_counter() - asked_at) * 1e6)
                reply = asked.reply()
                rows_of = read(reply)
        except BaseException:
            link.go.release()  # the worker's stream is not left waiting
            raise
        self._start.record()
        refresh()
        self.clock.flush()
        link.go.release()
        link.done.wait(go)  # the rows are read, and the end taken, once the worker says so
        try:
            if not on_time:  # a slow host's reply lengthens the next wait, as a quick one's
                reply = asked.reply()
                link.replies.append((time.perf_counter() - asked_at) * 1e6)
                rows_of = read(reply)
            rows = rows_of()
            self._end.record()
            limit = deadline()
            while not self._end.query():
                if time.monotonic() > limit:
                    raise Hung("the call did not finish")
        except BaseException:
            link.done.force(go)  # the parent's stream is not left waiting
            raise
        return Bracketed(self._start.elapsed_time(self._end), rows, finish(reply), not on_time)


class CpuBracket:
    """The parent's wall clock around a worker's call."""

    retaken = 0
    looked_again = 0  # the CPU's own-time rule takes no second look
    # What a bracket adds is read from the known call's brackets taken between the kernel's
    # samples, in its rounds (`Calibration.between`): on the CPU it depends on what the
    # processes did just before, which back-to-back brackets do not reproduce.
    interleaves = True

    @staticmethod
    def overhead_of(gaps: list[float], in_process: list[float]) -> float:
        """The median of the known call's brackets less its own time and the host's load
        inside them (`gaps`: the calibration worker's own clock, the harness's own code;
        isolation.MeasuredPlacement.bracketed_gap). The known call is SDPA on
        the sample's inputs, as on the GPU: a call that did nothing left its worker and the
        parent asleep for less time than a real call does, and its fresh output and queries
        in no other core's cache; such a bracket read 0.8 ms where an SDPA of 20 ms held
        2.5 ms beyond its own time (fp32 1 x 8 x 1024 x 64, one thread each, a quiet 2-core
        host, 2026-11-29: the worker's and the parent's wake-ups 0.7 ms, the copies in and
        out 0.8). The fastest such bracket, taken back to back, read the worker's SDPA
        1.04-1.12 of the parent's there (issue 49 item 4)."""
        return statistics.median(gaps)

    def sample(self, link, refresh, ask, read, deadline, finish, load=None) -> Bracketed:
        """The parent's clock, then the fresh queries written into the lent buffers
        (`refresh`), then the call asked for. `load` (host_load.LoadWindow): the host's load
        inside the bracket, read around it."""
        if load is not None:
            load.open()
        start = time.perf_counter()
        refresh()
        reply = ask(None).reply()
        rows = read(reply)()
        ms = (time.perf_counter() - start) * 1e3
        waited = load.close() if load is not None else None
        return Bracketed(ms, rows, finish(reply), waited_ms=waited)


def bracket_for(clock):
    return CudaBracket(clock) if isinstance(clock, timing.CudaClock) else CpuBracket()


# Samples of the calibration call on a fresh placement, after as many warm-up ones as
# warm its worker's path; on a placement kept from an earlier block, after one (a kept
# placement's samples spread about 1 us either side on an H200: isolation.CalibrationSamples;
# three, whose median still drops one late bracket, where four cost a block 5 ms more).
CALIBRATION_SAMPLES = 9
CALIBRATION_WARMUP = 3
CALIBRATION_SAMPLES_KEPT = 3


# On the CPU, the latest known-call brackets taken between a config's samples that what a
# bracket adds is read from (`Calibration.between`).
CALIBRATION_WINDOW = 9

# A GPU worker's own events read a call longer than the parent's events read the same call
# in the parent's process: SDPA (fp16, 2048 keys, D 128) +1.6-1.7 us at 0.22 ms a call,
# +1.1-1.4 us at 0.12 ms, +0.4 us at 0.06 ms, medians of 120 paired rounds; the worker's
# path through the harness read 0.8-1.1 % over the parent's at 0.22 ms in 6 of 6 runs (H200,
# 2026-11-30, tools/verdict/own_time_probe.py). Not the lent memory (the parent on it, or
# the child on its own copies: within 0.3 us of the parent) nor another process (the child
# timing itself, unlinked: the same), but the wait on the parent's go before the call
# (then an interprocess GO event), the GPU switching from the parent's context to the
# worker's. What the switch adds is read from the known call in single mode, where it is
# the one call of a bracket (a graph replay shares it between its calls): the medians of its
# own times over the latest OWN_OFFSET_WINDOW of its calibrations' brackets and of its
# in-process samples. At most OWN_OFFSET_MAX_FRACTION of the known call's time is taken
# off: the most a kernel can gain by slowing the harness's own worker while it calibrates
# (docs/security.md).
OWN_OFFSET_WINDOW = 64
OWN_OFFSET_MAX_FRACTION = 0.015


class KnownSamples(NamedTuple):
    """A calibration's samples of the known call, warm-up left out: its brackets (on the
    CPU, their gaps over its own time); GPU only, the same call in the parent's process by
    the parent's clock, and its own time in its worker by its own events, a bracket each."""

    bracketed: list[float]
    in_process: list[float] = []
    own: list[float] = []


class Calibration:
    """What a bracket adds to a call, per (config, mode, inputs refreshed, gated): from a
    known call's bracketed samples (`benches/calibration_kernel.py`, in a worker of the
    harness's own) as the bracket reads them (`overhead_of`). GPU: against the same call's
    samples in the parent's own process, taken at the first use after each `forget` (a
    block's start). CPU: the known call's brackets less its own time, taken once at a
    config's first use and then one a round between the kernel's samples
    (`between`, the runner's rounds), the latest CALIBRATION_WINDOW of them read."""

    def __init__(self, bracket, measure: Callable[..., KnownSamples]) -> None:
        self._bracket = bracket
        # (config, mode, copies, gated, count) -> KnownSamples
        self._measure = measure
        self._known: dict[tuple, float] = {}
        # GPU: the known call's latest own times in its worker, and its latest in-process
        # samples (`own_offset_ms`)
        self._own: dict[tuple, collections.deque[float]] = {}
        self._in_process: dict[tuple, list[float]] = {}
        self._between: dict[tuple, collections.deque[float]] = {}
        # CPU: the least any bracket of the key has added, and the keys whose next sample
        # reads it (`measure_again`)
        self._least: dict[tuple, float] = {}
        self._least_next: set[tuple] = set()

    def overhead_ms(self, config, mode: str, copies: int, gated: bool) -> float:
        key = (config.name, mode, copies, gated)
        if key in self._least_next:
            return self._least[key]
        window = self._between.get(key)
        if window:
            return statistics.median(window)
        if key not in self._known:
            known = self._measure(config, mode, copies, gated)
            self._known[key] = self._bracket.overhead_of(known.bracketed, known.in_process)
            self._keep_least(key, known.bracketed)
            if known.own and known.in_process:
                own = self._own.setdefault(key, collections.deque(maxlen=OWN_OFFSET_WINDOW))
                own.extend(known.own)
                self._in_process[key] = known.in_process
        return self._known[key]

    def own_offset_ms(self, config, mode: str, copies: int, gated: bool) -> float:
        """GPU, single mode: what a worker's own events add to a call over the parent's
        (OWN_OFFSET_WINDOW says why and how much), never below 0 nor above
        OWN_OFFSET_MAX_FRACTION of the known call; 0 elsewhere (a CPU sample is the
        harness's own)."""
        if mode != "single":
            return 0.0
        key = (config.name, mode, copies, gated)
        self.overhead_ms(config, mode, copies, gated)  # the key's calibration, if not taken yet
        own, in_process = self._own.get(key), self._in_process.get(key)
        if not own or not in_process:
            return 0.0
        call = statistics.median(in_process)
        return min(max(statistics.median(own) - call, 0.0), OWN_OFFSET_MAX_FRACTION * call)

    def between(self, config, mode: str, copies: int, gated: bool) -> None:
        """CPU: one bracket of the known call taken now, between the kernel's samples, into
        the window what a bracket adds is read from."""
        key = (config.name, mode, copies, gated)
        gaps = self._measure(config, mode, copies, gated, 1).bracketed
        window = self._between.setdefault(key, collections.deque(maxlen=CALIBRATION_WINDOW))
        window.extend(gaps)
        self._keep_least(key, gaps)
        self._least_next.discard(key)

    def _keep_least(self, key: tuple, gaps: list[float]) -> None:
        if self._bracket.interleaves:
            self._least[key] = min(gaps + [self._least.get(key, math.inf)])

    def measure_again(self, config, mode: str, copies: int, gated: bool) -> None:
        """A sample that kept no time: on the GPU measured afresh at the next use. On the
        CPU measured afresh now, and the sample taken again reads the least any of the
        key's brackets has added, until the next one between samples: a median taken in a
        loaded spell, or a call too short for the brackets' spread, would otherwise leave
        an honest call no time (tiny calls on a loaded 2-core host were refused so). The
        sample taken again can only keep more of its time."""
        key = (config.name, mode, copies, gated)
        self._known.pop(key, None)
        if self._bracket.interleaves:
            gaps = self._measure(config, mode, copies, gated).bracketed
            self._keep_least(key, gaps)
            self._least_next.add(key)

    def forget(self) -> None:
        """A new block: on the GPU measured again at its first use. (The CPU's window runs
        on across a config's blocks.)"""
        self._known.clear()
