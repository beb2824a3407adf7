"""Plants a known slowdown in a copy of kernels/ (developer tool, issue 49 item 5): the
slowed candidate of tools/gate/operating_point_device.sh and decisions_device.sh.

    PLANT=sleep PLANT_PCT=3 python3 tools/gate/plant_slowdown.py COPY/kernels
    PLANT=nanosleep DELAY_NS=40 python3 tools/gate/plant_slowdown.py COPY/kernels

sleep (the default): flash_attention first sleeps on the GPU (torch.cuda._sleep) for
PLANT_PCT % of the call, calibrated per shape in the worker (the kernel's own time and the
sleep's rate measured with CUDA events, the sleep's launch gap taken off), so the call takes
PLANT_PCT % longer whatever its shape. nanosleep: the Hopper kernel pauses DELAY_NS per K/V
block (a rebuild). Never in a real tree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# What the slowed tree's api.py gains: flash_attention wrapped by a calibrated sleep.
PLANTED = r'''

# ---- planted slowdown: tools/gate/plant_slowdown.py (never in a real tree) ----
_PLANT_FRACTION = {fraction!r}
_planted_cycles: dict = {}
_sleep_cycles_per_ms: list = []
_unplanted = flash_attention


def _ms_per_call(fn, calls=5):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _plant_cycles(q, k, v, causal, scale):
    """Sleep cycles that make this shape's call _PLANT_FRACTION longer, measured once per
    shape in this process: the kernel's own time, the sleep's cycles per ms, and what the
    sleep's launch adds beyond its cycles (taken off)."""
    key = (tuple(q.shape), tuple(k.shape), q.dtype, bool(causal), q.device.index)
    if key in _planted_cycles:
        return _planted_cycles[key]
    if torch.cuda.is_current_stream_capturing():
        return 0
    def run():
        return _unplanted(q, k, v, causal=causal, scale=scale)
    if not _sleep_cycles_per_ms:
        torch.cuda._sleep(1000)
        probe = 500_000
        _sleep_cycles_per_ms.append(
            probe / min(_ms_per_call(lambda: torch.cuda._sleep(probe)) for _ in range(3))
        )
    per_ms = _sleep_cycles_per_ms[0]
    for _ in range(3):
        run()
    plain = min(_ms_per_call(run) for _ in range(3))
    target = _PLANT_FRACTION * plain
    cycles = int(target * per_ms)
    def both():
        torch.cuda._sleep(cycles)
        return run()
    both()
    added = min(_ms_per_call(both) for _ in range(3)) - plain
    gap = added - cycles / per_ms  # the sleep's launch, beyond its cycles
    cycles = max(0, int((target - max(gap, 0.0)) * per_ms))
    _planted_cycles[key] = cycles
    return cycles


def flash_attention(q, k, v, causal=False, scale=None):
    """flash_attention, _PLANT_FRACTION slower (a planted slowdown)."""
    cycles = _plant_cycles(q, k, v, causal, scale)
    if cycles:
        torch.cuda._sleep(cycles)
    return _unplanted(q, k, v, causal=causal, scale=scale)
'''


def plant_nanosleep(root: Path, delay_ns: str) -> str:
    path = root / "flash_attention" / "csrc" / "flash_fwd_sm90_mainloop.cuh"
    text = path.read_text()
    site = "    steps.write_output(tile, tma_o);\n"
    pause = (
        f"    for (int j = 0; j < n_blocks; ++j) __nanosleep({delay_ns});  // plant_slowdown.py\n"
    )
    if text.count(site) != 1:
        raise SystemExit(f"{path}: the site to plant at is not there once")
    path.write_text(text.replace(site, pause + site))
    return f"planted: __nanosleep({delay_ns}) per K/V block (sm90)"


def plant_sleep(root: Path, percent: str) -> str:
    fraction = float(percent) / 100
    with open(root / "flash_attention" / "api.py", "a") as f:
        f.write(PLANTED.replace("{fraction!r}", repr(fraction)))
    return f"planted: torch.cuda._sleep for {fraction:.1%} of each call, calibrated per shape"


def main(argv: list[str]) -> int:
    root = Path(argv[1])
    if os.environ.get("PLANT", "sleep") == "nanosleep":
        print(plant_nanosleep(root, os.environ.get("DELAY_NS", "40")))
    else:
        print(plant_sleep(root, os.environ.get("PLANT_PCT", "3")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
