"""Timers and the interleaved measurement rounds.

GPU: CUDA events around each call, after zeroing a buffer twice the L2 size so every
sample starts from a cold cache (as triton's do_bench does). Events time the GPU, but the
GPU waits for the host if the call is enqueued late: measured on an H100, a pinned-SDPA
call costs ~70 µs of Python before its kernel launches, which added 70 µs to every sample.
So a spin kernel (torch.cuda._sleep) sized from the measured host enqueue time keeps the
GPU busy until the call is queued, and the events time the kernel alone. Kernels too short
for single launches (under plan.graph_below_us) are timed in CUDA-graph batches of about
GRAPH_BATCH_TARGET_US.
Where buffers lie moves a median by a few percent, so no buffer keeps one placement for a
whole run (measured on an H100):
- graph batches whose calls all rewrote one output buffer varied 3-7% from capture to
  capture at S=128; with a buffer per call, 0.1-0.6%. cuDNN SDPA still moved 2-3% between
  captures, so samples rotate over GRAPH_CAPTURES captures.
- (16,32,512,64) bf16 ran 2.3-2.5% faster, all implementations together, on one of six
  copies of its inputs: rounds rotate over INPUT_PLACEMENTS copies. Two runs still sat
  2.4% apart with input copies and FLUSH_BUFFERS flush buffers in turn, because every call
  got the allocator's same output block back; keeping OUTPUT_PLACEMENTS outputs alive
  brought that to 0.14%.
The flush writes (zero_, as do_bench does), so the timed kernel also writes back up to an
L2's worth of dirty lines: on that config a read-only flush ran 3-4.5% faster. The harness
keeps do_bench's method so that the two compare.
A sample whose host enqueue outlasted the spin (a host stall: measured on an H100, 0.4-1.2 ms
samples of a 0.15 ms kernel, host enqueue 1-1.8 ms against a 0.4 ms cover) timed the host,
not the kernel, and is taken again.
Before a config's timed rounds, `settle` runs the same interleaved calls, untimed, for
SETTLE_SECONDS: measured on an H100, the first ~60 ms of a new load ran 1.5-2.7% faster than
the steady state for every implementation, which moved a 50-round median by up to 3.8% from
one run to the next.
Placements: what lies where still moves a median from one set of buffers and captures to the
next, so each config's rounds are split among plan.placements independent placements
(benches.placement): every implementation gets fresh input copies after a spacer of random
size, fresh outputs and fresh graph captures in each, built in a random order, and the
speedup interval resamples placements (benches.stats).
Work off the calling stream: the events bracket the calling stream only. The gate replays
every implementation from a CUDA graph (correctness.graph_probe): capture fails on a forked
stream that is never joined, and work on a stream never forked is not captured, so the
replayed output stays poisoned. What passes that probe enqueues all its work in order on
the calling stream, which the events do bracket.
CPU: perf_counter around each call.
"""

from __future__ import annotations

import collections
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import numpy as np

Call = Callable[[], object]
T = TypeVar("T")
Sampler = Callable[[], float]  # one timed sample, milliseconds per call

STABLE_WINDOW = 5  # warmup compares the medians of the last two windows of this many calls
STABLE_TOLERANCE = 0.02
GRAPH_BATCH_TARGET_US = 2000.0  # a graph sample lasts about this long...
GRAPH_CALLS_MIN, GRAPH_CALLS_MAX = 8, 256  # ...within these batch sizes
GRAPH_CAPTURES = 2  # per placement
# Rounds rotate over copies of a config's inputs (see the module docstring), within a memory cap.
INPUT_PLACEMENTS = 4
OUTPUT_PLACEMENTS = 3  # outputs kept alive per implementation: 4 buffers in turn
INPUT_COPIES_BYTES_MAX = 1 << 30
FLUSH_MIN_BYTES = 64 << 20
FLUSH_BUFFERS = 4  # samples take them in turn
# The spin before each sample lasts COVER_FACTOR x the median host enqueue time of recent
# calls, within these bounds; _sleep counts SM cycles, converted at a clock above any GPU's
# boost, so at lower clocks the cover only gets longer.
COVER_FACTOR = 3.0
COVER_MIN_US, COVER_MAX_US = 50.0, 2000.0
COVER_CYCLES_PER_US = 2500
HOST_HISTORY = 32
RETAKES_MAX = 3  # a stalled sample is taken again at most this many times
SETTLE_SECONDS = 0.25


class Clock(Protocol):
    supports_graphs: bool

    def time_call(self, fn: Call) -> float: ...

    def graph_sampler(self, fn: Call, calls: int) -> Sampler: ...


class CpuClock:
    """Host wall clock; torch's CPU ops are synchronous, so this brackets the work."""

    supports_graphs = False

    def time_call(self, fn: Call) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    def graph_sampler(self, fn: Call, calls: int) -> Sampler:
        raise NotImplementedError("CUDA graphs need a CUDA device")


def l2_flush_buffer(device):
    """A buffer whose zeroing evicts the device's L2: twice its size, at least
    FLUSH_MIN_BYTES."""
    import torch

    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    size = max(2 * l2_bytes, FLUSH_MIN_BYTES)
    return torch.empty(size // 4, dtype=torch.int32, device=device)


class CudaClock:
    supports_graphs = True

    def __init__(self, device, flush_l2: bool) -> None:
        import torch

        self._torch = torch
        self._flush_buffers: list = []
        if flush_l2:
            self._flush_buffers = [l2_flush_buffer(device) for _ in range(FLUSH_BUFFERS)]
        self._flush_turns = itertools.cycle(self._flush_buffers)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._host_us: collections.deque[float] = collections.deque(maxlen=HOST_HISTORY)
        self.retaken = 0  # samples taken again after a host stall, for the run's log

    def flush(self) -> None:
        """Evict the L2 (the next buffer in turn zeroed), where the plan asks for it."""
        if self._flush_buffers:
            next(self._flush_turns).zero_()

    def cover_us(self) -> float:
        recent = statistics.median(self._host_us) if self._host_us else COVER_MAX_US / 4
        return min(max(COVER_FACTOR * recent, COVER_MIN_US), COVER_MAX_US)

    def time_call(self, fn: Call) -> float:
        for _ in range(RETAKES_MAX):
            ms, covered = self._sample(fn)
            if covered:
                return ms
            self.retaken += 1
        return self._sample(fn)[0]

    def _sample(self, fn: Call) -> tuple[float, bool]:
        """(ms, whether the spin outlasted the host's enqueue). The spin lasts at least
        cover_us at any clock up to COVER_CYCLES_PER_US MHz, so host_us <= cover_us means the
        kernel was queued before the GPU reached the start event."""
        cover_us = self.cover_us()
        self._torch.cuda._sleep(int(cover_us * COVER_CYCLES_PER_US))
        self.flush()
        enqueue_start = time.perf_counter()
        self._start.record()
        fn()
        self._end.record()
        host_us = (time.perf_counter() - enqueue_start) * 1e6
        self._host_us.append(host_us)
        self._end.synchronize()
        return self._start.elapsed_time(self._end), host_us <= cover_us

    def graph_sampler(self, fns: list[Call], calls: int) -> Sampler:
        """A sample replays a batch of `calls` back-to-back calls (L2 flushed before the
        batch, not between its calls) and reports the time per call."""
        batch = self.graph_batch(fns, calls)
        return lambda: self.time_call(batch) / calls

    def graph_batch(self, fns: list[Call], calls: int) -> GraphBatch:
        return GraphBatch([capture(fns[i % len(fns)], calls) for i in range(GRAPH_CAPTURES)])


class GraphBatch:
    """Replays captures of `calls` back-to-back calls in turn, each on the next of `fns` (one
    per input copy), so the median spans several buffer placements instead of resting on
    one. last_output() is the last call's output of the capture replayed last."""

    def __init__(self, captures: list[tuple]) -> None:
        self._captures = captures
        self._turn = -1

    def __call__(self) -> None:
        self._turn = (self._turn + 1) % len(self._captures)
        self._captures[self._turn][0].replay()

    def last_output(self):
        return self._captures[max(self._turn, 0)][1]


def capture(fn: Call, calls: int) -> tuple:
    """(graph, output of its last call): a CUDA graph of `calls` back-to-back calls, warmed
    first as capture needs. The outputs stay alive until capture ends (one buffer each);
    the last one stays for the timed-loop check."""
    graph, outputs = capture_each([fn] * calls)
    return graph, outputs[-1]


def capture_each(fns: list[Call]) -> tuple:
    """(graph, every call's output): a CUDA graph calling each of `fns` once, in order,
    warmed first as capture needs (each output its own buffer of the graph's pool)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture needs lazy initialisation done off-graph
        for _ in range(3):
            fns[0]()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = [fn() for fn in fns]
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    return graph, outputs


def input_copies(inputs: tuple, copies: int = INPUT_PLACEMENTS) -> list[tuple]:
    """Clones of `inputs` at fresh addresses, as many as fit INPUT_COPIES_BYTES_MAX."""
    size = sum(t.numel() * t.element_size() for t in inputs)
    count = max(1, min(copies, INPUT_COPIES_BYTES_MAX // max(size, 1)))
    return [tuple(t.clone() for t in inputs) for _ in range(count)]


class OutputRing:
    """Holds the last OUTPUT_PLACEMENTS outputs of a call, so that successive calls write to
    different buffers: freed at once, every call would get the allocator's same block back,
    and that one placement would hold for a whole run."""

    def __init__(self) -> None:
        self._outputs: collections.deque = collections.deque(maxlen=OUTPUT_PLACEMENTS)

    def keep(self, call: Call) -> Call:
        return lambda: self.hold(call())

    def hold(self, out) -> None:
        self._outputs.append(out)

    def last_output(self):
        return self._outputs[-1] if self._outputs else None


def cycling(calls: list[Callable[[], T]]) -> Callable[[], T]:
    """One call that runs the next of `calls` each time. Over samplers: every implementation
    samples once per round, so a round's samples share a placement."""
    turns = itertools.cycle(calls)
    return lambda: next(turns)()


def warm_up(sample: Sampler, minimum: int, maximum: int) -> list[float]:
    """Call until the median of the last window moves less than 2% from the window before.

    Always at least one call: the first one loads modules and creates handles.
    """
    times: list[float] = []
    limit = max(maximum, 1)
    while len(times) < limit:
        times.append(sample())
        if len(times) >= max(minimum, 2 * STABLE_WINDOW):
            last = statistics.median(times[-STABLE_WINDOW:])
            before = statistics.median(times[-2 * STABLE_WINDOW : -STABLE_WINDOW])
            if abs(last - before) <= STABLE_TOLERANCE * before:
                break
    return times


def settled_median_ms(warmup_times: list[float]) -> float:
    return statistics.median(warmup_times[-STABLE_WINDOW:])


def graph_calls_for(median_us: float) -> int:
    """Enough calls per graph replay that one sample lasts about GRAPH_BATCH_TARGET_US."""
    calls = math.ceil(GRAPH_BATCH_TARGET_US / max(median_us, 0.1))
    return min(max(calls, GRAPH_CALLS_MIN), GRAPH_CALLS_MAX)


def batch_calls_for(median_us: float) -> int:
    """On the CPU, enough back-to-back calls per sample that one lasts about
    GRAPH_BATCH_TARGET_US: a worker's call is timed through a pipe whose noise (tens to
    hundreds of microseconds on a loaded machine) would otherwise bury a short call."""
    calls = math.ceil(GRAPH_BATCH_TARGET_US / max(median_us, 0.1))
    return min(max(calls, 1), GRAPH_CALLS_MAX)


def settle(
    samplers: dict[str, Sampler], seconds: float, rng: np.random.Generator, min_rounds: int = 1
) -> int:
    """Untimed interleaved rounds for `seconds` (at least `min_rounds`), so the GPU's clock and
    power reach the state this config's duty cycle holds before samples count. Returns the
    number of rounds run."""
    deadline = time.perf_counter() + seconds
    rounds = 0
    while rounds < min_rounds or time.perf_counter() < deadline:
        for _ in interleaved_rounds(samplers, 1, rng, lambda: False):
            pass
        rounds += 1
    return rounds


def interleaved_rounds(
    samplers: dict[str, Sampler],
    rounds: int,
    rng: np.random.Generator,
    should_stop: Callable[[], bool],
) -> Iterator[tuple[int, str, float]]:
    """(round, implementation, ms) for each sample; every round runs each implementation
    once, in a fresh random order, so drift (clocks, temperature) hits all of them alike and
    round r's samples form a pair for the speedup statistics. Stops at a sample boundary."""
    names = list(samplers)
    for round_index in range(rounds):
        for position in rng.permutation(len(names)):
            if should_stop():
                return
            name = names[position]
            yield round_index, name, samplers[name]()
