"""Issue 53 item 2 against the better cuDNN: ours over max(SDPA's cuDNN, cudnn-fe) (developer tool).

    python3 tools/flash_attention/better_cudnn.py measure OUT.json [--reps 30] [--kinds grid,gqa]
    python3 tools/flash_attention/better_cudnn.py summarize OUT1.json OUT2.json ...

`measure` (one process, the H200 with `.whl` and `.whl-cudnn` installed) times, per cell, our
kernel, SDPA pinned to cuDNN and cuDNN's frontend graph (`cudnn-fe`, on BSHD copies as NVIDIA's
samples lay them out and on BHSD views of the memory ours reads) as ab.py and acceptance_n.sh
time (bench.paired_ms: each call alone after a 256 MB L2 flush, the four taking turns call by
call); a cell's ratio is the median over rounds of ours against the fastest of the three cuDNN
readings of that round. TFLOP/s by 4·b·hq·s²·d, halved for causal; 32k tokens a cell (batch =
32768 / S). Cells: the FA grid from S = 1024 (D 64/128/256 at a model width of 2048, both
dtypes, causal both), GQA 32/8 and 64/8 (D 64 and 128, bf16), and on request (`--kinds
ragged`) a ragged-wave sweep (D = 64 non-causal, S = 4096, batch 2, 8-16 heads: 352-704 tiles of
192 rows on the 132 SMs' persistent grid, whole rounds at 9, 12 and 15 heads, a partial last
round between). The sweep does not read waves: a cell against its neighbours spread 0.82-1.22
in one process, for cuDNN alike, and 3-15 % between processes (NOTES.md, sessions 20-21), so it
is no longer measured by default; ab.py's sweep, builds interleaved in one process, does (h51).
Our output is checked against SDPA's on every cell.

`summarize` prints, per cell, ours over the better cuDNN in each process and its median, the
item's figures (none below 1.00, median, D = 64 median) and, for the sweep, each head count's
TFLOP/s against its neighbours' mean (item 2: within 3 %).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TOKENS, WIDTH = 32768, 2048
SEQLENS = (1024, 4096, 16384)
CUDNN = ("sdpa-cudnn", "fe-bshd", "fe-bhsd")


def cells() -> list[dict]:
    grid = [
        {"dtype": dtype, "hq": WIDTH // d, "hk": WIDTH // d, "d": d, "causal": causal, "s": s}
        for dtype in ("float16", "bfloat16")
        for d in (64, 128, 256)
        for causal in (False, True)
        for s in SEQLENS
    ]
    gqa = [
        {"dtype": "bfloat16", "hq": hq, "hk": 8, "d": d, "causal": causal, "s": s}
        for hq in (32, 64)
        for d in (64, 128)
        for causal in (False, True)
        for s in SEQLENS
    ]
    # 22 tiles of 192 rows a head at S = 4096 (three consumers), batch 2: 352-704 tiles on the
    # 132 SMs' persistent grid, whole rounds at 9, 12 and 15 heads (396, 528, 660), a partial
    # last round between.
    ragged = [
        {"dtype": "bfloat16", "hq": h, "hk": h, "d": 64, "causal": False, "s": 4096, "b": 2}
        for h in range(8, 17)
    ]
    return (
        [dict(c, kind="grid") for c in grid]
        + [dict(c, kind="gqa") for c in gqa]
        + [dict(c, kind="ragged") for c in ragged]
    )


def label(c: dict) -> str:
    dt = "fp16" if c["dtype"] == "float16" else "bf16"
    heads = f"{c['hq']}/{c['hk']}" if c["hq"] != c["hk"] else str(c["hq"])
    batch = f" b{c['b']}" if "b" in c else ""
    causal = "causal" if c["causal"] else "full  "
    return f"{c['kind']:6} {dt} D{c['d']:<3} h{heads:<5} {causal} {c['s']:>5}{batch}"


def timed_calls(c: dict, q, k, v, ours, sdpa, fe) -> dict:
    """Each implementation's call on one cell's BHSD inputs, its copies made before timing."""
    bshd = fe.native_inputs((q, k, v))
    views = tuple(t.transpose(1, 2) for t in (q, k, v))
    return {
        "ours": lambda: ours(q, k, v, causal=c["causal"]),
        "sdpa-cudnn": lambda: sdpa.run(q, k, v, c["causal"]),
        "fe-bshd": lambda: fe.run(*bshd, c["causal"]),
        "fe-bhsd": lambda: fe.run(*views, c["causal"]),
    }


def measure(out: Path, reps: int, kinds: set[str]) -> None:
    import torch
    from bench import paired_ms, tflops  # tools/flash_attention/bench.py, as ab.py times

    from benches import peers, registry
    from kernels.flash_attention.api import flash_attention

    fe = registry.get("cudnn-fe")
    sdpa = registry.get("sdpa-cudnn")
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")

    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn_torch": peers.cudnn_version_string(torch.backends.cudnn.version()),
        "cudnn_fe": peers.cudnn_library_version(),
        "reps": reps,
    }
    rows = []
    for index, c in enumerate(cells()):
        if c["kind"] not in kinds:
            continue
        torch.manual_seed(index)
        dtype = getattr(torch, c["dtype"])
        b = c.get("b", TOKENS // c["s"])
        q = torch.randn(b, c["hq"], c["s"], c["d"], device="cuda", dtype=dtype)
        k, v = (torch.randn(b, c["hk"], c["s"], c["d"], device="cuda", dtype=dtype) for _ in "kv")
        calls = timed_calls(c, q, k, v, flash_attention, sdpa, fe)
        torch.cuda.synchronize()
        error = (calls["ours"]() - calls["sdpa-cudnn"]()).abs().max().item()
        times = paired_ms(calls, flush, reps)
        rate = {
            n: tflops(b, c["hq"], c["s"], c["d"], c["causal"], statistics.median(t))
            for n, t in times.items()
        }
        # Per round, ours against the fastest cuDNN reading of that round (bench.py's vs_best).
        rounds = zip(times["ours"], *(times[n] for n in CUDNN), strict=True)
        vs_best = statistics.median(min(cudnn) / ours for ours, *cudnn in rounds)
        best = max(rate[n] for n in CUDNN)
        row = dict(c, b=b, tflops=rate, vs_best=vs_best, max_diff=error)
        rows.append(row)
        print(
            f"{label(c)}  ours {rate['ours']:6.1f}  best cuDNN {best:6.1f}"
            f"  {row['vs_best']:.3f}  |diff| {error:.2e}",
            flush=True,
        )
        del q, k, v, calls
        torch.cuda.empty_cache()
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def summarize(paths: list[Path]) -> None:
    runs = [json.loads(p.read_text()) for p in paths]
    by = [{label(r): r for r in run["rows"]} for run in runs]
    med = statistics.median
    print(runs[0]["meta"])
    print(
        f"{len(runs)} processes; ours / max(SDPA-cuDNN, cudnn-fe) per process | median;"
        " TFLOP/s ours / best cuDNN (medians); max |ours - SDPA|"
    )
    medians = {}
    for k in by[0]:
        rows = [b[k] for b in by if k in b]
        ratios = [r["vs_best"] for r in rows]
        medians[k] = med(ratios)
        ours = med(r["tflops"]["ours"] for r in rows)
        best = med(r["tflops"]["ours"] / r["vs_best"] for r in rows)
        print(
            f"{k} | " + " ".join(f"{x:.3f}" for x in ratios) + f" | {medians[k]:.3f}"
            f" | {ours:6.1f} / {best:6.1f} | {max(r['max_diff'] for r in rows):.1e}"
        )
    for kind in ("grid", "gqa"):
        v = {k: m for k, m in medians.items() if k.startswith(kind)}
        if not v:
            continue
        d64 = [m for k, m in v.items() if " D64 " in k]
        d64c = [m for k, m in v.items() if " D64 " in k and "causal" in k]
        below = sorted((m, k) for k, m in v.items() if m < 1.0)
        print(
            f"{kind}: {len(v)} cells, median {med(v.values()):.3f}, min {min(v.values()):.3f},"
            f" D=64 median {med(d64):.3f} (causal {med(d64c):.3f}), below 1.00: {len(below)}"
            + "".join(f"\n  {m:.3f} {k}" for m, k in below)
        )
    ragged = [k for k in by[0] if k.startswith("ragged")]
    if not ragged:
        return
    rate = {k: med(b[k]["tflops"]["ours"] for b in by) for k in ragged}
    cud = {k: med(b[k]["tflops"]["ours"] / b[k]["vs_best"] for b in by) for k in ragged}
    print(
        "ragged sweep (D=64 full S=4096 b2): heads, TFLOP/s ours (vs its neighbours' mean),"
        " best cuDNN (vs neighbours)"
    )
    for i, k in enumerate(ragged):
        line = f"  {k.split()[3]:>5} {rate[k]:6.1f}"
        if 0 < i < len(ragged) - 1:
            mean = (rate[ragged[i - 1]] + rate[ragged[i + 1]]) / 2
            cmean = (cud[ragged[i - 1]] + cud[ragged[i + 1]]) / 2
            line += f" ({rate[k] / mean:.3f})  {cud[k]:6.1f} ({cud[k] / cmean:.3f})"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out", type=Path)
    m.add_argument("--reps", type=int, default=30)
    m.add_argument("--kinds", default="grid,gqa", help="which cells: grid, gqa, ragged")
    s = sub.add_parser("summarize")
    s.add_argument("paths", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out, args.reps, set(args.kinds.split(",")))
    else:
        summarize(args.paths)


if __name__ == "__main__":
    sys.exit(main())
