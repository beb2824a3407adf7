"""The harness's own clock around a call made in a kernel's worker process.

The code under test may patch anything in its own process, timers included, so no time
read there becomes a sample. The parent brackets each call instead:

GPU. The parent's stream: a spin long enough to cover the handshake below, its start
event, fresh queries written into the worker's input buffer, the L2 flush, then an
interprocess event GO. The worker's stream waits for GO, makes the call and records its
interprocess event DONE; the worker replies where its output lies. The parent polls DONE
from the host (its stream never waits on an event of the worker's: a worker that dies
with such a wait pending leaves the parent's stream blocked for good, measured on an
H200, 2026-11-29), reads the sampled rows of the output on its own stream, then records
its end event. The rows are read after the call's work is done or they are wrong: the
end event cannot come before the work (benches/row_checks.py).

CPU, and a GPU worker that runs as another user than the harness (the driver shares no
interprocess event between users): gated from the host. The parent starts its clock (GPU:
its start event, then the flush, waited for), then asks for the call. On the CPU the
parent writes the sample's fresh queries into the lent buffers between the two; on the GPU
the call brings a seed, from which the worker makes them in the lent buffers (the parent
makes the same numbers for its reference). Either way nothing can start on them before the
clock does. Then the worker's word that the work is over, the rows read, the end of the
clock.

Either way the bracket holds more than the call: the context switch to the worker and
back (about 0.33 ms on an H200), the refresh, the flush, the poll, the row reads, the
pipe. A worker of the harness's own runs a known call (`benches/calibration_kernel.py`),
bracketed the same way: on the GPU, SDPA, whose time the parent also takes in its own
process, the two medians' difference being what a bracket adds; on the CPU a call that does
nothing, whose fastest bracket is. What is left, less that, is the call.
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from benches import timing

# The spin before each sample covers what the host does before the worker's call is
# enqueued behind GO: the sample's refresh, the flush and GO enqueued, the request, the
# worker's enqueue and its reply (0.2-0.4 ms for our kernel's worker on an H200). It lasts
# COVER_FACTOR x the median of the latest HANDSHAKE_HISTORY such spans of brackets with as
# many lent queries (a graph sample refreshes up to 256), within these bounds. Brackets of
# one key share a history, the calibration's included: a late handshake (GPU idle inside the
# bracket, waiting on the host) is what a bracket must never hold. (A 0.4 ms floor was
# tried: two honest kernels' brackets then read 0.03 ms a call over their own events in the
# GPU tests, refused as liars; H200, 2026-11-29.)
COVER_US = 1000.0
COVER_MAX_US = 20000.0
COVER_FACTOR = 2.0
HANDSHAKE_HISTORY = 16
RETAKES_MAX = 3  # a sample whose handshake outlasted the cover is taken again


class Hung(Exception):
    """The worker's call did not finish by the request's deadline."""


@dataclass(frozen=True)
class Bracketed:
    """One bracketed call: the parent's time (ms, overhead included), the rows it read,
    the worker's reply, and whether the handshake outlasted the cover (then the time also
    holds the worker's host enqueue)."""

    ms: float
    rows: torch.Tensor
    reply: dict
    late: bool
    # CPU: how long the parent's thread and the worker's main thread sat runnable but not
    # running inside the bracket (benches/host_load.py), None where unread
    waited_ms: float | None = None


class CudaBracket:
    """The parent's events around a worker's call; one per parent, used for every worker
    (`link`: the worker's GO and DONE)."""

    keeps_the_floor = False  # the GPU's calibration is a median, taken afresh each block

    def __init__(self, clock: timing.CudaClock) -> None:
        self.clock = clock
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self.retaken = 0
        self.looked_again = 0  # the own-time rule's second looks (isolation._look_again)
        self._handshakes: dict[Hashable, collections.deque[float]] = {}

    @staticmethod
    def overhead_of(bracketed: list[float], in_process: list[float]) -> float:
        """The known call's median bracket less its median time in the parent's own
        process (each spreads about 1 us either side on an H200, 2026-11-29)."""
        return statistics.median(bracketed) - statistics.median(in_process)

    def sample(
        self,
        link,
        refresh: Callable[[], None],
        call: Callable[[], dict],
        read: Callable[[dict], torch.Tensor],
        deadline: Callable[[], float],
        finish: Callable[[dict], dict],
        cover_key: Hashable = None,
        load=None,
    ) -> Bracketed:
        """`refresh` writes the call's fresh inputs, `call` asks the worker for the call and
        returns its reply, `read` finds where that reply says the output is and returns
        what reads the rows there, once the call is done;
        `deadline()` is when the worker must have finished (monotonic seconds); `finish`
        takes the worker's last word on the call once the bracket is closed (every call's,
        a retaken one's too), and its answer stands as the sample's reply. `cover_key`
        names the brackets whose host spans size this one's spin (COVER_FACTOR). `load`
        is the CPU's (CpuBracket): the GPU's events hold no host wait."""
        for _ in range(RETAKES_MAX):
            taken = self._once(link, refresh, call, read, deadline, finish, cover_key)
            if not taken.late:
                return taken
            self.retaken += 1
        return self._once(link, refresh, call, read, deadline, finish, cover_key)

    def cover_us(self, cover_key: Hashable = None) -> float:
        """The spin before a bracket of `cover_key` (see COVER_FACTOR)."""
        history = self._handshakes.get(cover_key)
        if not history:
            return COVER_US
        return min(COVER_MAX_US, max(COVER_US, COVER_FACTOR * statistics.median(history)))

    def _once(self, link, refresh, call, read, deadline, finish, cover_key=None) -> Bracketed:
        if link is None:
            return self._gated(call, read, finish)
        torch.cuda._sleep(int(self.cover_us(cover_key) * timing.COVER_CYCLES_PER_US))
        spin_enqueued = time.perf_counter()
        self._start.record()
        refresh()
        self.clock.flush()
        link.go.record()
        reply = call()
        late = link.go.query()
        history = self._handshakes.setdefault(
            cover_key, collections.deque(maxlen=HANDSHAKE_HISTORY)
        )
        history.append((time.perf_counter() - spin_enqueued) * 1e6)
        # Where the output lies is found (an allocation seen for the first time is mapped:
        # the driver's IPC open takes a while) while the call runs, not inside what follows
        # its end; the rows themselves are read once it is done.
        rows_of = read(reply)
        limit = deadline()
        while not link.done.query():
            if time.monotonic() > limit:
                raise Hung("the call did not finish")
        rows = rows_of()
        self._end.record()
        self._end.synchronize()
        return Bracketed(self._start.elapsed_time(self._end), rows, finish(reply), late)

    def _gated(self, call, read, finish) -> Bracketed:
        """Gated from the host (a worker running as another user: no event in common): the
        parent's start event, the flush, and only once the GPU has reached them the call
        (whose fresh queries the worker makes from the seed it brings); the worker's word
        that its work is over, then the rows read and the end event. The host's handshake
        lies inside this bracket: the known call's, gated the same way, takes it out."""
        self._start.record()
        self.clock.flush()
        torch.cuda.current_stream().synchronize()
        reply = call()
        rows_of = read(reply)
        last = finish(reply)
        rows = rows_of()
        self._end.record()
        self._end.synchronize()
        return Bracketed(self._start.elapsed_time(self._end), rows, last, False)


class CpuBracket:
    """The parent's wall clock around a worker's call."""

    retaken = 0
    looked_again = 0  # the CPU's own-time rule takes no second look
    # The fastest bracket of the calibration call in any block: a loaded spell during one
    # block's calibration would otherwise take more off its samples than the bracket adds
    # (and leave an honest call with no time at all).
    keeps_the_floor = True

    @staticmethod
    def overhead_of(bracketed: list[float], in_process: list[float]) -> float:
        """The calibration call's fastest bracket (it does nothing): on the CPU the
        bracket's spread is the host's scheduling, one-sided, which the parent's own
        samples carry too (subtracting the median would take typical noise off a worker's
        samples alone, and leave a noisy one below zero: seen on a loaded 2-core machine,
        2026-11-29)."""
        return min(bracketed)

    def sample(
        self, link, refresh, call, read, deadline, finish, cover_key=None, load=None
    ) -> Bracketed:
        """The parent's clock, then the fresh queries written into the lent buffers
        (`refresh`), then the call asked for. `load` (host_load.LoadWindow): the host's load
        inside the bracket, read around it."""
        if load is not None:
            load.open()
        start = time.perf_counter()
        refresh()
        reply = call()
        rows = read(reply)()
        ms = (time.perf_counter() - start) * 1e3
        waited = load.close() if load is not None else None
        return Bracketed(ms, rows, finish(reply), False, waited)


def bracket_for(clock):
    return CudaBracket(clock) if isinstance(clock, timing.CudaClock) else CpuBracket()


# Samples of the calibration call on a fresh placement, after as many warm-up ones as
# warm its worker's path; on a placement kept from an earlier block, after one (a kept
# placement's samples spread about 1 us either side on an H200: isolation.CalibrationSamples;
# three, whose median still drops one late bracket, where four cost a block 5 ms more).
CALIBRATION_SAMPLES = 9
CALIBRATION_WARMUP = 3
CALIBRATION_SAMPLES_KEPT = 3


class Calibration:
    """What a bracket adds to a call, per (config, mode, inputs refreshed, gated): from a
    known call's bracketed samples (`benches/calibration_kernel.py`, in a worker of the harness's
    own) and, on the GPU, the same call's samples in the parent's own process, as the
    bracket reads them (`overhead_of`), taken at the first use after each `forget`."""

    def __init__(self, bracket, measure: Callable[[object, str, int, bool], tuple]) -> None:
        self._bracket = bracket
        # (config, mode, copies, gated) -> (the known call's bracketed samples, its samples
        # in the parent's own process: none on the CPU), warm-up samples left out
        self._measure = measure
        self._known: dict[tuple, float] = {}
        self._floor: dict[tuple, float] = {}

    def overhead_ms(self, config, mode: str, copies: int, gated: bool) -> float:
        key = (config.name, mode, copies, gated)
        if key not in self._known:
            bracketed, in_process = self._measure(config, mode, copies, gated)
            measured = self._bracket.overhead_of(bracketed, in_process)
            if self._bracket.keeps_the_floor and key in self._floor:
                measured = min(measured, self._floor[key])
            self._known[key] = self._floor[key] = measured
        return self._known[key]

    def measure_again(self, config, mode: str, copies: int, gated: bool) -> None:
        """At the next use, measured afresh; on the CPU never above what was measured before
        (`keeps_the_floor`), so the next sample can only keep more of its time."""
        self._known.pop((config.name, mode, copies, gated), None)

    def forget(self) -> None:
        """A new block: measured again at its first use (on the CPU, never above what an
        earlier block measured: `keeps_the_floor`)."""
        self._known.clear()
