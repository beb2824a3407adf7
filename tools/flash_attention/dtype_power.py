"""The SM clock and board power while one attention config runs back to back (developer tool).

    PYTHONPATH=.:tools/flash_attention python3 tools/flash_attention/dtype_power.py \
        [--head-dim 128 --seqlen 8192] [--seconds 2] [--rounds 2] [--define NAME=INT ...] \
        [--impls flash,sdpa-cudnn] [--kinds fp16,bf16,fp16-bf16vals]

Why (NOTES.md, "2026-11-29, later"): our fp16 D = 128 kernel ran 0-4 % below our bf16 one with
the same SASS. Each case runs its calls back to back for --seconds (no L2 flush: the steady
state that a power cap acts on) while a thread reads NVML every 20 ms: the SM clock, the board
power and the clock-event reasons (power cap, thermal). Cases: ours and sdpa-cudnn on fp16 and
bf16 inputs from torch.randn, and on fp16 inputs holding bf16 values (randn rounded to bf16,
then to fp16: the low 3 mantissa bits zero). Per case: ms per call (median of batches of 10),
the median clock and power, and cycles per call (ms x clock): equal cycles at unequal speeds
say the clock, not the code, sets the difference. Rounds take the cases in turns. --define
builds ours with measurement switches (csrc/switches.h): one process per build, to compare
builds' clocks and cycles (NOTES.md, h31).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import threading
import time

import torch
from bench import HIDDEN, IMPLS, TOKENS

from kernels.flash_attention import build, load_library


class Nvml:
    """The few NVML reads needed, through ctypes (no pynvml on the device machine)."""

    SM_CLOCK = 1

    def __init__(self, index: int = 0) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)) != 0:
            raise RuntimeError("nvmlDeviceGetHandleByIndex_v2 failed")

    def read(self) -> tuple[int, float, int]:
        clock, milliwatts, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        self.lib.nvmlDeviceGetClockInfo(self.handle, self.SM_CLOCK, ctypes.byref(clock))
        self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(milliwatts))
        self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(reasons))
        return clock.value, milliwatts.value / 1000, reasons.value


def sample(nvml: Nvml, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        out.append(nvml.read())
        time.sleep(0.02)


def run_case(fn, q, k, v, causal: bool, seconds: float, nvml: Nvml) -> dict:
    for _ in range(20):
        fn(q, k, v, causal)
    torch.cuda.synchronize()
    samples: list = []
    stop = threading.Event()
    thread = threading.Thread(target=sample, args=(nvml, stop, samples))
    times = []
    end = time.monotonic() + seconds
    thread.start()
    while time.monotonic() < end:
        start, stop_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            fn(q, k, v, causal)
        stop_ev.record()
        stop_ev.synchronize()
        times.append(start.elapsed_time(stop_ev) / 10)
    stop.set()
    thread.join()
    # The first 0.2 s of samples may predate the clock's settling.
    steady = samples[10:] or samples
    reasons = 0
    for _, _, r in steady:
        reasons |= r
    ms = statistics.median(times)
    clock = statistics.median(s[0] for s in steady)
    return {
        "ms": ms,
        "mhz": clock,
        "watts": statistics.median(s[1] for s in steady),
        "mcycles": ms * clock / 1000,
        "reasons": reasons,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--define", action="append", default=[], metavar="NAME=INT")
    parser.add_argument("--impls", default="flash,sdpa-cudnn")
    parser.add_argument("--kinds", default="fp16,bf16,fp16-bf16vals")
    args = parser.parse_args()
    defines = build.parse_defines(args.define)
    load_library(defines=defines)
    nvml = Nvml()
    batch, heads = TOKENS // args.seqlen, HIDDEN // args.head_dim
    shape = (batch, heads, args.seqlen, args.head_dim)
    torch.manual_seed(0)
    base = [torch.randn(shape, device="cuda") for _ in range(3)]
    data = {
        "fp16": [t.half() for t in base],
        "bf16": [t.bfloat16() for t in base],
        "fp16-bf16vals": [t.bfloat16().half() for t in base],
    }
    kinds = args.kinds.split(",")
    cases = [(impl, kind) for impl in args.impls.split(",") for kind in kinds]
    results: dict = {case: [] for case in cases}
    for _ in range(args.rounds):
        for impl, kind in cases:
            results[(impl, kind)].append(
                run_case(IMPLS[impl], *data[kind], args.causal, args.seconds, nvml)
            )
    flops = 4 * batch * heads * args.seqlen**2 * args.head_dim / (2 if args.causal else 1)
    print(
        f"D={args.head_dim} S={args.seqlen} causal={args.causal} defines={defines}; per round: "
        "ms  TFLOP/s  SM MHz  W  Mcycles/call  clock-event reasons"
    )
    for (impl, kind), rows in results.items():
        cells = "  |  ".join(
            f"{r['ms']:.3f} {flops / r['ms'] / 1e9:.0f} {r['mhz']:.0f} {r['watts']:.0f}"
            f" {r['mcycles']:.3f} {r['reasons']:#x}"
            for r in rows
        )
        print(f"{impl:>11} {kind:>14}: {cells}")


if __name__ == "__main__":
    main()
