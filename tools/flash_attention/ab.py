"""In-process A/B of kernel builds that differ in measurement switches (developer tool).

Every build named with --build is loaded into this one process and timed with sdpa-flash,
call by call, in orders balanced for which follows which (bench.paired_ms, each call after
its own L2 flush). A build's ratio to the first build is the median of the per-round ratios,
so the process's clock state and memory placement land on every build alike. Between
processes, the same build's ratio to sdpa-flash moves by up to +-2 % at S = 1024 (NOTES.md,
v12-v16). Ratios between builds taken here repeated across processes to within 0.7 %, but one
cell (bf16, S = 1024, the first after a long fp16 run) moved by up to 3 %: run twice before
trusting a cell. compare.sh (one process per build) stays the acceptance measurement; this screens.
Nor is vs_flash an acceptance figure: here sdpa-flash runs at one of two speeds per process
and config, so one build's S = 1024 vs_flash read 0.990-0.995 or 1.066-1.097 (NOTES.md, v17).

The first build also runs a second time under the name FIRST-again (an A/A control; --no-aa
leaves it out): its vs_base is what this process's timing alone moves a ratio by. With 3-8
builds and --reps 150-300 (17 processes, 122 cells) it was within 0.2 % in 96 cells and
within 1 % in 116, and reached 1.2-2.2 % in six cells at S = 1024-2048, the copy never more
than 0.07 % the slower (NOTES.md, v17): a difference between builds no larger than its cell's
A/A is not one.

    PYTHONPATH=.:tools/flash_attention python3 tools/flash_attention/ab.py \
        --build shipped= --build one_per_start=FLASH_SPREAD_GROUP=1 [--seqlens 1024,16384]

Hopper candidates against cuDNN (issue 34 item 1): `--no-l4 --peers sdpa-cudnn,sdpa-flash
--head-dims 64,128 --causal both`; each build then gets vs_cudnn and vs_flash per cell.

A build is NAME=SWITCH=VALUE,SWITCH=VALUE (csrc/switches.h; empty for the shipped code), or
NAME@DIR=SWITCHES: the kernels/ tree under DIR (an older version, e.g. `git archive HEAD
kernels | tar -x -C DIR`), built by its own build.py with the same switches and called through
this tree's binding (the C ABI only ever appends fields, csrc/flash_api.h).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from bench import HIDDEN, IMPLS, L4_DEFINES, TOKENS, paired_ms, tflops

from kernels.flash_attention import build
from kernels.flash_attention.api import _forward, _Library
from kernels.flash_attention.generate import DTYPES, HEAD_DIMS

# Several builds of one code base in one process: without it the loader binds every library's
# launcher statics (the opt-in flags, the tensor-map encoder) to the first library's copies,
# and a later build's kernel launches without its shared-memory opt-in ("invalid argument").
OWN_STATICS_FLAG = "-Xcompiler=-fno-gnu-unique"

# Largest |ours - SDPA| accepted before timing (the builds measured in v16: 0.004 at most), or
# two ulps of the largest output in the inputs' dtype where that is more: each of the two may
# round it once away from the other. bf16 outputs of 4-8 (a causal row's first few keys) have an
# ulp of 0.03125, and a kernel that sums P as rounded for P V (NOTES.md h36) differs from SDPA by
# one ulp there while as far from the float64 result (0.0083 against 0.0076, simulated).
MAX_ABS_ERROR = 0.02


def max_abs_error_allowed(reference: torch.Tensor, dtype: torch.dtype) -> float:
    largest = reference.abs().max().item()
    if not (math.isfinite(largest) and largest > 0):
        return MAX_ABS_ERROR
    ulp = 2.0 ** math.floor(math.log2(largest)) * torch.finfo(dtype).eps
    return max(MAX_ABS_ERROR, 2 * ulp)


def parse_build(spec: str, l4: bool) -> tuple[str, str | None, dict[str, int]]:
    """NAME[@DIR]=SWITCHES -> (NAME, DIR or None, defines)."""
    name, _, switches = spec.partition("=")
    name, _, tree = name.partition("@")
    if not name:
        raise SystemExit(f"--build {spec!r}: expected NAME[@DIR]=[SWITCH=VALUE,...]")
    defines = dict(L4_DEFINES) if l4 else {}
    defines.update(build.parse_defines([item for item in switches.split(",") if item]))
    return name, tree or None, dict(sorted(defines.items()))


def tree_library(tree: str, defines: dict[str, int]) -> _Library:
    """The library of the kernels/ tree under `tree`, built by that tree's own build.py in a
    child process whose imports resolve to it."""
    root = Path(tree).resolve()
    record = Path(tempfile.mkdtemp(prefix="ab-tree-")) / "build.json"
    command = [sys.executable, "-m", "kernels.flash_attention.build", "--record", str(record)]
    command += [f"--define={name}={value}" for name, value in defines.items()]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build of {root} failed:\n{proc.stderr[-3000:]}")
    return _Library(json.loads(record.read_text()))


def launched_kernels(fn) -> list[str]:
    """Names of the GPU kernels one call of fn launches."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", required=True, metavar="NAME=SWITCHES")
    parser.add_argument("--seqlens", default="1024,2048,4096,16384")
    parser.add_argument("--head-dims", default="128", help=f"comma list of {HEAD_DIMS}")
    parser.add_argument(
        "--causal", nargs="?", const="yes", default="no", choices=("no", "yes", "both")
    )
    parser.add_argument("--dtypes", default=",".join(d.torch_name for d in DTYPES))
    parser.add_argument(
        "--peers", default="sdpa-flash", help="SDPA backends timed beside the builds (bench.IMPLS)"
    )
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument(
        "--heads", help="comma list of head counts (default: 2048 / D, the FA grid's width)"
    )
    parser.add_argument("--batch", type=int, help="batch (default: 16k tokens / S)")
    parser.add_argument(
        "--l4",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="under L4 emulation (default) or not",
    )
    parser.add_argument(
        "--aa",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the first build twice, the second time as FIRST-again (default) or not",
    )
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    # Builds of one code base in one process each keep their own launcher statics.
    appended = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} {OWN_STATICS_FLAG}".strip()
    os.environ["NVCC_APPEND_FLAGS"] = appended
    parsed = [parse_build(spec, args.l4) for spec in args.build]
    builds = {name: {"tree": tree, "defines": defines} for name, tree, defines in parsed}
    libraries = {
        name: tree_library(tree, defines) if tree else _Library(build.build(defines=defines))
        for name, tree, defines in parsed
    }
    if args.aa:
        # The same library object: the same kernels, taking their own turn in each round.
        first = next(iter(builds))
        libraries[f"{first}-again"] = libraries[first]
        builds[f"{first}-again"] = builds[first]
    names = list(libraries)
    peers = args.peers.split(",")
    peer_keys = {peer: "vs_" + peer.removeprefix("sdpa-") for peer in peers}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    rows = []
    causal_settings = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    grid = itertools.product(
        args.dtypes.split(","),
        map(int, args.head_dims.split(",")),
        causal_settings,
        map(int, args.seqlens.split(",")),
        [int(h) for h in args.heads.split(",")] if args.heads else [None],
    )
    for dtype_name, head_dim, causal, seqlen, heads in grid:
        dtype = getattr(torch, dtype_name)
        batch, heads = args.batch or TOKENS // seqlen, heads or HIDDEN // head_dim
        q, k, v = (
            torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=dtype)
            for _ in range(3)
        )
        scale = 1 / math.sqrt(head_dim)
        fns = {n: partial(_forward, q, k, v, causal, scale, lib=libraries[n]) for n in names}
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        # A build that computes the wrong thing must not be timed as a candidate.
        errors = {n: (fns[n]()[0].float() - reference).abs().max().item() for n in names}
        allowed = max_abs_error_allowed(reference, dtype)
        wrong = {n: e for n, e in errors.items() if not e <= allowed}
        if wrong:
            raise SystemExit(f"{dtype_name} D={head_dim} S={seqlen}: off the reference: {wrong}")
        for peer in peers:
            fns[peer] = partial(IMPLS[peer], q, k, v, causal)
        times = paired_ms(fns, flush, args.reps)
        row = {"dtype": dtype_name, "S": seqlen, "D": head_dim, "causal": causal}
        row |= {"batch": batch, "heads": heads}
        # The kernels each peer launched (cuDNN's engine is in its kernel's name: whether a
        # process's cuDNN speed is another plan, NOTES.md "2026-11-28, later").
        row["peer_kernels"] = {peer: launched_kernels(fns[peer]) for peer in peers}
        for n in names:
            to_base = [b / t for b, t in zip(times[names[0]], times[n], strict=True)]
            ms = statistics.median(times[n])
            row[n] = {
                "tflops": round(tflops(batch, heads, seqlen, head_dim, causal, ms), 1),
                "vs_base": round(statistics.median(to_base), 4),
                "max_abs_error": errors[n],
            }
            for peer, key in peer_keys.items():
                to_peer = [f / t for t, f in zip(times[n], times[peer], strict=True)]
                row[n][key] = round(statistics.median(to_peer), 4)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"builds": builds, "rows": rows}, f, indent=1)
    width = max(12, *map(len, names))  # FIRST-again is longer than most names

    def cell(r: dict) -> str:
        shape = f"{r['dtype'][:4]}{r['D']}{'c' if r['causal'] else ''}{r['S']}"
        return f"{shape}h{r['heads']}" if args.heads else shape

    print(f"\n{'build':>{width}}" + "".join(f"{cell(r):>12}" for r in rows))
    for key in ("vs_base", *peer_keys.values()):
        print(key)
        for n in names:
            print(f"{n:>{width}}" + "".join(f"{r[n][key]:>12.3f}" for r in rows))
    for key in peer_keys.values():
        for n in names:
            vals = [r[n][key] for r in rows]
            print(f"{key} {n:>{width}}: median {statistics.median(vals):.3f}, min {min(vals):.3f}")


if __name__ == "__main__":
    main()
