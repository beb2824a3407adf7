"""Developer benchmark of the kernel against SDPA (not the bench harness; no pydantic needed).

Grid of FlashAttention's own benchmarks: B*S = 16k tokens, H*D = 2048, S 512..16384.
CUDA events around each call, 256 MB L2 flush before each, median of --reps after warmup; the
implementations take turns call by call, and a ratio is the median of per-round ratios.

    PYTHONPATH=. python3 tools/flash_attention/bench.py [--reps 30] [--json out.json]
    PYTHONPATH=. python3 tools/flash_attention/bench.py --l4     # the L4 path, emulated

Measurement switches (--variant, --emulate-smem-per-sm, --l4, --sm80) build a library with
the matching -D flags (csrc/switches.h); the JSON records them. One configuration per process.

Grouped-query attention: --group G gives k and v heads / G heads (SDPA with enable_gqa);
--heads fixes the query heads (default H*D = 2048). An SDPA backend that refuses a shape is
left out of that row; vs_best is the ratio to the fastest SDPA backend of each round.

    PYTHONPATH=. python3 tools/flash_attention/bench.py --head-dims 128 --heads 32 --group 4 \
        --impls flash,sdpa-flash,sdpa-cudnn,sdpa-efficient
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels.flash_attention import build, flash_attention, load_library

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
L4_SMEM_PER_SM = 102400  # the L4's shared memory per SM (sm_89: 100 KB)
# The L4 path under emulation: the L4's shared memory per SM, the sm_80 kernel on sm_90.
L4_DEFINES = {"FLASH_EMULATE_SMEM_PER_SM": L4_SMEM_PER_SM, "FLASH_DISABLE_SM90": 1}
VARIANTS = {"auto": 0, "wide": 1, "compact": 2}
TOKENS, HIDDEN = 16384, 2048


def _sdpa_with(backend):
    def run(q, k, v, causal):
        gqa = k.shape[1] != q.shape[1]
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return run


IMPLS = {
    "flash": lambda q, k, v, c: flash_attention(q, k, v, causal=c),
    "sdpa-flash": _sdpa_with(SDPBackend.FLASH_ATTENTION),
    "sdpa-cudnn": _sdpa_with(SDPBackend.CUDNN_ATTENTION),
    "sdpa-efficient": _sdpa_with(SDPBackend.EFFICIENT_ATTENTION),
}
DEFAULT_IMPLS = "flash,sdpa-flash,sdpa-cudnn"
PEERS = (("sdpa-flash", "vs_flash"), ("sdpa-cudnn", "vs_cudnn"), ("sdpa-efficient", "vs_eff"))


def runnable(fns: dict) -> tuple[dict, dict[str, str]]:
    """The implementations that run on these inputs, and why the others refused."""
    kept, refused = {}, {}
    for name, fn in fns.items():
        try:
            fn()
        except RuntimeError as err:  # e.g. an SDPA backend without this head dim or GQA
            refused[name] = str(err).splitlines()[0][:160]
        else:
            kept[name] = fn
    torch.cuda.synchronize()
    return kept, refused


def balanced_orders(names: list[str], rounds: int) -> list[list[str]]:
    """An order of `names` for each of `rounds` rounds in which every name directly follows
    every other equally often (a Williams design: n orders for n names, 2n where n is odd,
    repeated; a count of rounds that is a multiple of that balances it exactly). One order
    rotated each round put the same name after the same other in every round but one a cycle
    (A after D in A B C D, B C D A, ...), and a name timed after cuDNN's calls read 2-16 %
    below its own A/A copy (NOTES.md, "2026-11-30 (session 21)": 3 % slower right after a cuDNN
    call, the SM clock the same, the cause not found)."""
    n = len(names)
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n - 1, 2, n - 2, ...
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    design = [[(i + shift) % n for i in first] for shift in range(n)]
    if n % 2:
        design += [order[::-1] for order in design]
    return [[names[i] for i in design[r % len(design)]] for r in range(rounds)]


def paired_ms(fns: dict, flush: torch.Tensor, reps: int, warmup: int = 5) -> dict[str, list[float]]:
    """Per implementation, `reps` event-timed calls, each after an L2 flush. The
    implementations take turns call by call (in an order balanced for which follows which,
    balanced_orders), so that a clock or power drift over the measurement lands on all of them
    alike: timed one after another in blocks, the same kernel moved by up to 12 % between
    processes (NOTES.md, v12)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for order in balanced_orders(names, reps):
        for name in order:
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[name]()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return times


def tflops(batch, heads, seqlen, head_dim, causal, ms) -> float:
    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    return flops / (ms * 1e-3) / 1e12


def host_overhead_us(calls: int = 2000) -> float:
    """Host time of one eager call on a tiny input (the GPU keeps up, so this is host bound)."""
    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for _ in range(50):
        flash_attention(q, k, v)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        flash_attention(q, k, v)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json")
    parser.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--impls", default=DEFAULT_IMPLS, help=f"subset of {','.join(IMPLS)}")
    parser.add_argument("--heads", type=int, default=0, help="query heads (default 2048 / D)")
    parser.add_argument("--group", type=int, default=1, help="query heads per k/v head (GQA)")
    parser.add_argument("--variant", choices=VARIANTS, default="auto", help="sm_80 kernel shape")
    parser.add_argument("--emulate-smem-per-sm", type=int, default=0, metavar="BYTES")
    parser.add_argument(
        "--l4", action="store_true", help=f"= --emulate-smem-per-sm {L4_SMEM_PER_SM} --sm80"
    )
    parser.add_argument("--sm80", action="store_true", help="no Hopper path on sm_90")
    parser.add_argument("--define", action="append", default=[], metavar="NAME=INT")
    args = parser.parse_args()
    defines = {
        "FLASH_FORCE_VARIANT": VARIANTS[args.variant],
        "FLASH_EMULATE_SMEM_PER_SM": args.emulate_smem_per_sm,
        "FLASH_DISABLE_SM90": int(args.sm80),
    }
    if args.l4:
        defines.update(L4_DEFINES)
    defines = {name: value for name, value in defines.items() if value}
    defines.update(build.parse_defines(args.define))
    record = load_library(defines=defines).record
    impls = {name: IMPLS[name] for name in args.impls.split(",")}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    rows = []
    seqlens = [int(s) for s in args.seqlens.split(",")]
    head_dims = [int(d) for d in args.head_dims.split(",")]
    causal_settings = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",")]
    grid = itertools.product(dtypes, head_dims, causal_settings, seqlens)
    for dtype, head_dim, causal, seqlen in grid:
        batch, heads = TOKENS // seqlen, args.heads or HIDDEN // head_dim
        q = torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype)
        k, v = (
            torch.randn(batch, heads // args.group, seqlen, head_dim, device="cuda", dtype=dtype)
            for _ in "kv"
        )
        row = {
            "dtype": str(dtype).removeprefix("torch."),
            "D": head_dim,
            "causal": causal,
            "S": seqlen,
            "B": batch,
            "H": heads,
            "H_kv": heads // args.group,
        }
        fns = {name: partial(impl, q, k, v, causal) for name, impl in impls.items()}
        fns, refused = runnable(fns)
        if refused:
            row["refused"] = refused
        times = paired_ms(fns, flush, args.reps)
        for name, samples in times.items():
            ms = statistics.median(samples)
            row[name] = round(tflops(batch, heads, seqlen, head_dim, causal, ms), 1)
        for peer, key in PEERS:
            if "flash" in times and peer in times:
                # The median of the round-by-round speed ratios: calls of one round ran
                # back to back, under the same clocks.
                ratios = [p / f for p, f in zip(times[peer], times["flash"], strict=True)]
                row[key] = round(statistics.median(ratios), 3)
        peers = [name for name in times if name.startswith("sdpa")]
        if "flash" in times and peers:
            best = [min(t) for t in zip(*(times[name] for name in peers), strict=True)]
            ratios = [b / f for b, f in zip(best, times["flash"], strict=True)]
            row["vs_best"] = round(statistics.median(ratios), 3)
            row["ms"] = {name: round(statistics.median(times[name]), 4) for name in times}
        rows.append(row)
        print(json.dumps(row), flush=True)
    overhead = host_overhead_us()
    if args.json:
        with open(args.json, "w") as f:
            meta = {"defines": record["defines"], "arch": record["arch"]}
            json.dump({"rows": rows, "host_overhead_us": overhead, **meta}, f, indent=1)
    print(f"\nhost path per eager call: {overhead:.1f} us")
    print(
        f"{'dtype':9}{'D':>4}{'causal':>7}{'S':>6}{'H/Hkv':>7}{'flash':>8}{'sdpa-fl':>8}"
        f"{'cudnn':>8}{'effic':>8}{'x fl':>6}{'x cudnn':>8}{'x eff':>6}{'x best':>7}"
        f"   (TFLOP/s) defines={record['defines']}"
    )
    for r in rows:
        keys = ("flash", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient")
        ratio_keys = ("vs_flash", "vs_cudnn", "vs_eff", "vs_best")
        cells = [r.get(key, "-") for key in keys + ratio_keys]
        heads = f"{r['H']}/{r['H_kv']}"
        print(
            f"{r['dtype']:9}{r['D']:>4}{r['causal']!s:>7}{r['S']:>6}{heads:>7}"
            + "".join(f"{c:>8}" for c in cells[:4])
            + f"{cells[4]:>6}{cells[5]:>8}{cells[6]:>6}{cells[7]:>7}"
        )


if __name__ == "__main__":
    main()
