"""The FP8 (e4m3) forward on the GPU (issue 53 item 4): correctness, timing, cuDNN's FP8 SDPA.

    python3 tools/flash_attention/fp8_check.py correct OUT.json [--dims 128 256]
    python3 tools/flash_attention/fp8_check.py time OUT.json [--dims 128 256] [--iters N]
    python3 tools/flash_attention/fp8_check.py cudnn OUT.json [--dims 128 256] [--iters N]
    python3 tools/flash_attention/fp8_check.py turns OUT.json [--dims 128 256] [--reps 3]
    python3 tools/flash_attention/fp8_check.py table OUT.json... (the last table)

Each step is its own process (fp8_device.sh runs them under `timeout`), so that a kernel that
faults or hangs still leaves the other steps' figures.

correct: q, k, v drawn N(0, 1), quantized to e4m3 per tensor (descale = amax / 448), against
float64 attention on the DEQUANTIZED inputs (what the kernel is asked to compute), beside an
emulated FP8 reference in torch: the same float64 scores, P = exp(s - max) * 2^8 rounded to
e4m3 as the kernel rounds it, O = (P V) / (the unrounded row sums). Its error against float64 is
the error FP8's P alone brings; the kernel's should be of that size (plus bf16's output
rounding). Each case runs every schedule of --flags: 0 the shipped choice per shape (the
consumers' turns where they pay), 1 the turns off (FLASH_FP8_NO_PINGPONG), 2 always on
(FLASH_FP8_PINGPONG), 16 two S tiles in flight per consumer warpgroup (FLASH_FP8_TWO_S, D = 128;
D = 256 runs the shipped kernel under it), 17 and 18 that with the turns forced off or on, 32
one S tile (FLASH_FP8_ONE_S). At D = 128, 0 takes 224-key tiles from 8192 keys (16384 causal;
NOTES "f6") and 16, 17, 18 and 32 128-key ones: where they differ, the online softmax folds other
key blocks together, so O is not bitwise equal to 0's (within the bound); every 128-key schedule
does the same arithmetic in the same order (O bitwise equal among them), and at D = 256 all
take 128-key tiles.

time: TFLOP/s (4 b h s^2 d, halved for causal) of our FP8 call (the V transpose included), of
our bf16 kernel on the same shapes, at S = 16k, B = 2: MHA 16 heads at D = 128 and 256, GQA 64/8 at
D = 128; median of CUDA-event times over ITERS calls after warm-up.

cudnn: the same shapes through cuDNN's frontend graph API (graph.sdpa_fp8: e4m3 in, per-tensor
descales, O in bf16 where the frontend takes it, else e4m3), if `import cudnn` works.

turns: the --flags schedules and cuDNN's FP8 SDPA on the `time` shapes, interleaved in one
process: --reps rounds, each timing every one of them once (bench.balanced_orders), per shape;
each figure the median of its rounds' medians (tools/flash_attention/fp8_turns_device.sh).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import OWN_STATICS_FLAG  # noqa: E402
from bench import balanced_orders  # noqa: E402

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
FLAG_NO_PINGPONG = 1  # csrc/flash_api.h FLASH_FP8_NO_PINGPONG
FLAG_PINGPONG = 2  # csrc/flash_api.h FLASH_FP8_PINGPONG
FLAG_TWO_S = 16  # csrc/flash_api.h FLASH_FP8_TWO_S: 128-key tiles, two S in flight (NOTES "f5")
FLAG_ONE_S = 32  # csrc/flash_api.h FLASH_FP8_ONE_S: 128-key tiles, one S
FLAG_TILE_GRID = 64  # csrc/flash_api.h FLASH_FP8_TILE_GRID: one block per tile (NOTES "f9")
# Each schedule's label in the JSON (err_<label>) and the table. (f3's poly_exp2 flags,
# a retired patch, experiments/README.md, were 4, 8, 12: "ours_poly2of8", "ours_poly3of8", ...)
SCHEDULES = {
    0: "ours",
    FLAG_NO_PINGPONG: "ours_no_pingpong",
    FLAG_PINGPONG: "ours_pingpong",
    FLAG_TWO_S: "ours_two_s",
    FLAG_TWO_S | FLAG_NO_PINGPONG: "ours_two_s_no_pingpong",
    FLAG_TWO_S | FLAG_PINGPONG: "ours_two_s_pingpong",
    FLAG_ONE_S: "ours_one_s",
    FLAG_TILE_GRID: "ours_tile_grid",
    FLAG_ONE_S | FLAG_TILE_GRID: "ours_one_s_tile_grid",
}
# The tables' column names.
SHOWN = {
    "ours": "auto",
    "ours_no_pingpong": "no-turns",
    "ours_pingpong": "turns",
    "ours_two_s": "two-S",
    "ours_two_s_no_pingpong": "2S-noturn",
    "ours_two_s_pingpong": "2S-turns",
    "ours_one_s": "one-S",
    "ours_tile_grid": "tile-grid",
    "ours_one_s_tile_grid": "1S-tiles",
}


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor e4m3 and its descale (one float32 on x's device)."""
    descale = (x.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
    return (x / descale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), descale.reshape(1)


def references(q8, k8, v8, descales, causal: bool, scale: float):
    """float64 attention on the dequantized inputs, and the emulated-FP8 one (P in e4m3)."""
    qd, kd, vd = (t.double() * d.double() for t, d in zip((q8, k8, v8), descales, strict=True))
    group = qd.shape[1] // kd.shape[1]
    if group > 1:
        kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    outs64, outs_emu, lses = [], [], []
    for h0 in range(0, qd.shape[1], 4):  # a few heads at a time: S x S in float64
        s = torch.matmul(qd[:, h0 : h0 + 4], kd[:, h0 : h0 + 4].transpose(-1, -2)) * scale
        if causal:
            s_q, s_k = s.shape[-2:]
            mask = torch.ones(s_q, s_k, dtype=torch.bool, device=s.device).tril(s_k - s_q)
            s = s.masked_fill(~mask, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        total = e.sum(-1, keepdim=True)
        vh = vd[:, h0 : h0 + 4]
        safe = torch.where(total > 0, total, torch.ones_like(total))
        outs64.append(torch.matmul(e, vh) / safe)
        p8 = (e * 256.0).float().to(E4M3).double() / 256.0  # the kernel's P: max -> 2^8
        outs_emu.append(torch.matmul(p8, vh) / safe)
        lses.append((m + torch.log(total)).squeeze(-1))
    return torch.cat(outs64, 1), torch.cat(outs_emu, 1), torch.cat(lses, 1)


def save(args, result: dict) -> None:
    """Writes the step's figures so far (a step cut off by its timeout leaves them)."""
    args.out[0].write_text(json.dumps({**result, "partial": True}, indent=1))


def variants(args) -> list[tuple[str, int]]:
    """The kernel's schedules to run: those whose probe finished (--flags)."""
    return [(SCHEDULES[f], f) for f in args.flags]


def step_probe(args) -> dict:
    """One small call per head dim and causal setting with flags --flags[0]: the device script
    runs it under a short timeout first, so that a schedule that hangs is left out of the rest."""
    from kernels.flash_attention import api

    rows = []
    if args.big:  # what ncu profiles: MHA 16 heads, B = 2, S = 16k, non-causal, 5 calls
        q8, dq = quantize(torch.randn(2, 16, 16384, args.dims[0], device="cuda"))
        for _ in range(5):
            api._forward_fp8(q8, q8, q8, False, args.dims[0] ** -0.5, [dq, dq, dq], args.flags[0])
        torch.cuda.synchronize()
        return {"big": True}
    for d in args.dims:
        for causal in (False, True):
            q8, dq = quantize(torch.randn(1, 2, 1000, d, device="cuda"))
            out, _ = api._forward_fp8(q8, q8, q8, causal, d**-0.5, [dq, dq, dq], args.flags[0])
            torch.cuda.synchronize()
            rows.append({"d": d, "causal": causal, "finite": bool(out.isfinite().all().item())})
    print(json.dumps(rows))
    return {"rows": rows}


def step_correct(args) -> dict:
    from kernels.flash_attention import api

    torch.manual_seed(0)
    rows = []
    cases = [
        (d, b, hq, hkv, s, causal)
        for d in args.dims
        for (b, hq, hkv, s) in (
            (2, 16, 16, 512),
            (2, 16, 16, 4096),
            (2, 16, 16, 1000),
            (1, 16, 4, 1000),
        )
        for causal in (False, True)
    ]
    for d, b, hq, hkv, s, causal in cases:
        q = torch.randn(b, hq, s, d, device="cuda")
        k = torch.randn(b, hkv, s, d, device="cuda")
        v = torch.randn(b, hkv, s, d, device="cuda")
        (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
        scale = d**-0.5
        ref64, emu, lse64 = references(q8, k8, v8, (dq, dk, dv), causal, scale)
        row = {"d": d, "b": b, "hq": hq, "hkv": hkv, "s": s, "causal": causal}
        row["err_emulated"] = (emu - ref64).abs().max().item()
        first = None  # the first schedule's O: the turns reorder issue, not arithmetic
        for label, flags in variants(args):
            try:
                out, lse = api._forward_fp8(q8, k8, v8, causal, scale, [dq, dk, dv], flags)
                torch.cuda.synchronize()
                if first is None:
                    first = out
                else:
                    row[f"bitwise_equal_{label}"] = bool(torch.equal(out, first))
                row[f"err_{label}"] = (out.double() - ref64).abs().max().item()
                row[f"lse_err_{label}"] = (lse.double() - lse64).abs().max().item()
                row[f"nan_{label}"] = bool(torch.isnan(out).any().item())
            except Exception as err:  # a fault is a figure too; the other cases still run
                row[f"error_{label}"] = f"{type(err).__name__}: {err}"[:300]
                if "illegal" in str(err).lower() or "launch failure" in str(err).lower():
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    return {"rows": rows, "aborted": "CUDA context lost"}
        # Rule: within twice the emulated reference's error plus bf16's rounding of |O| <= ~1.
        bound = 2 * row["err_emulated"] + 2**-8
        row["bound"] = bound
        row["ok"] = bool(args.flags) and all(
            row.get(f"err_{label}", math.inf) <= bound and not row.get(f"nan_{label}", True)
            for label, _ in variants(args)
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(args, {"rows": rows})
    # Descales given as numbers and through the public entry point (one case, the shipped
    # schedule, if its probe finished).
    public = {}
    if 0 in args.flags:
        q8, dq = quantize(torch.randn(2, 16, 512, 128, device="cuda"))
        out_t = api.flash_attention(q8, q8, q8, q_descale=dq, k_descale=dq, v_descale=dq)
        out_f = api.flash_attention(
            q8, q8, q8, q_descale=dq.item(), k_descale=dq.item(), v_descale=dq.item()
        )
        public = {
            "public_entry_same": bool(torch.equal(out_t, out_f)),
            "dtype": str(out_t.dtype),
            "backend": api.backend_name(q8, False),
        }
        print(json.dumps(public), flush=True)
    return {"rows": rows, "public": public}


SHAPES = [  # (label, b, hq, hkv, s, d, causal)
    ("mha16 d128", 2, 16, 16, 16384, 128, False),
    ("mha16 d128 causal", 2, 16, 16, 16384, 128, True),
    ("gqa64/8 d128", 2, 64, 8, 16384, 128, False),
    ("mha16 d256", 2, 16, 16, 16384, 256, False),
    ("mha16 d256 causal", 2, 16, 16, 16384, 256, True),
]


def tflops(b, hq, s, d, causal, ms) -> float:
    flops = 4 * b * hq * s * s * d / (2 if causal else 1)
    return flops / (ms * 1e-3) / 1e12


def time_call(fn, warmup: int, iters: int) -> float:
    """Median ms of `iters` calls, each timed by its own CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def shapes(args):
    """SHAPES at --dims, and at each of --seqlens as 32k tokens (S = 16k: B = 2; 1024: B = 32)."""
    rows = [row for row in SHAPES if row[5] in args.dims]
    if not args.seqlens:
        return rows
    return [
        (f"{label} s{s}", b * 16384 // s, hq, hkv, s, d, causal)
        for s in args.seqlens
        for label, b, hq, hkv, _, d, causal in rows
    ]


def step_time(args) -> dict:
    from kernels.flash_attention import api

    rows = []
    for label, b, hq, hkv, s, d, causal in shapes(args):
        row = {"label": label}
        q = torch.randn(b, hq, s, d, device="cuda")
        k = torch.randn(b, hkv, s, d, device="cuda")
        v = torch.randn(b, hkv, s, d, device="cuda")
        (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
        qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
        scale = d**-0.5
        descales = [dq, dk, dv]
        calls = {
            SCHEDULES[flags].replace("ours", "fp8"): partial(
                api._forward_fp8, q8, k8, v8, causal, scale, descales, flags
            )
            for flags in args.flags
        }
        calls["bf16"] = partial(api.flash_attention, qb, kb, vb, causal=causal)
        for name, fn in calls.items():
            try:
                ms = time_call(fn, args.warmup, args.iters)
                row[name] = round(tflops(b, hq, s, d, causal, ms), 1)
                row[f"{name}_ms"] = round(ms, 4)
            except Exception as err:
                row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(args, {"rows": rows})
    return {"rows": rows}


def cudnn_fp8_runner(q8, k8, v8, descales, causal, scale):
    """A callable running cuDNN's FP8 SDPA on these BHSD tensors, and the O dtype it writes."""
    import cudnn

    handle = cudnn.create_handle()
    last_error = None
    for o_type, o_torch in (
        (cudnn.data_type.BFLOAT16, torch.bfloat16),
        (cudnn.data_type.FP8_E4M3, E4M3),
    ):
        try:
            graph = cudnn.pygraph(
                io_data_type=cudnn.data_type.FP8_E4M3,
                intermediate_data_type=cudnn.data_type.FLOAT,
                compute_data_type=cudnn.data_type.FLOAT,
                handle=handle,
            )
            tq, tk, tv = (
                graph.tensor(
                    name=n, dim=list(t.shape), stride=list(t.stride()),
                    data_type=cudnn.data_type.FP8_E4M3,
                )
                for n, t in (("q", q8), ("k", k8), ("v", v8))
            )  # fmt: skip
            one = torch.ones(1, 1, 1, 1, dtype=torch.float32, device=q8.device)
            scalars = {
                "descale_q": descales[0].reshape(1, 1, 1, 1),
                "descale_k": descales[1].reshape(1, 1, 1, 1),
                "descale_v": descales[2].reshape(1, 1, 1, 1),
                "descale_s": one,
                "scale_s": one,
                "scale_o": one,
            }
            declared = {
                n: graph.tensor(
                    name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT
                )
                for n in scalars
            }
            o, _stats, amax_s, amax_o = graph.sdpa_fp8(
                q=tq, k=tk, v=tv, **declared,
                is_inference=True, attn_scale=scale, use_causal_mask=causal,
            )  # fmt: skip
            b, h, s, d = q8.shape
            o.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
            o.set_data_type(o_type)
            amax_s.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1])
            amax_s.set_data_type(cudnn.data_type.FLOAT)
            amax_o.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1])
            amax_o.set_data_type(cudnn.data_type.FLOAT)
            graph.validate()
            graph.build_operation_graph()
            graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            graph.check_support()
            graph.build_plans()
            workspace = torch.empty(
                max(1, graph.get_workspace_size()), dtype=torch.uint8, device=q8.device
            )
            out = torch.empty(b, h, s, d, dtype=o_torch, device=q8.device)
            amax = torch.empty(2, dtype=torch.float32, device=q8.device)
            pack = {tq: q8, tk: k8, tv: v8, o: out, amax_s: amax[0:1], amax_o: amax[1:2]}
            pack.update({declared[n]: t for n, t in scalars.items()})
            cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
            return partial(_cudnn_execute, graph, pack, workspace, handle, out), str(o_torch)
        except Exception as err:
            last_error = err
    raise RuntimeError(f"cudnn sdpa_fp8: {last_error}")


def _cudnn_execute(graph, pack, workspace, handle, out):
    graph.execute(pack, workspace, handle=handle)
    return out


def step_cudnn(args) -> dict:
    try:
        import cudnn
    except Exception as err:
        return {"skipped": f"import cudnn: {err}"}
    version = str(cudnn.backend_version())
    rows = []
    for label, b, hq, hkv, s, d, causal in shapes(args):
        row = {"label": label}
        q = torch.randn(b, hq, s, d, device="cuda")
        k = torch.randn(b, hkv, s, d, device="cuda")
        v = torch.randn(b, hkv, s, d, device="cuda")
        (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
        try:
            run, o_dtype = cudnn_fp8_runner(q8, k8, v8, (dq, dk, dv), causal, d**-0.5)
            row["cudnn_o_dtype"] = o_dtype
            if args.flags and hq == hkv:  # a sanity figure: cuDNN's O against ours
                from kernels.flash_attention import api

                ours = api._forward_fp8(q8, k8, v8, causal, d**-0.5, [dq, dk, dv], args.flags[0])[0]
                theirs = run().float()
                row["max_diff_vs_ours"] = (ours.float() - theirs).abs().max().item()
            ms = time_call(run, args.warmup, args.iters)
            row["cudnn_fp8"] = round(tflops(b, hq, s, d, causal, ms), 1)
            row["cudnn_fp8_ms"] = round(ms, 4)
        except Exception as err:
            row["cudnn_fp8_error"] = f"{type(err).__name__}: {err}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(args, {"cudnn_backend_version": version, "rows": rows})
    return {"cudnn_backend_version": version, "rows": rows}


def build_libraries(items: list[str]) -> dict:
    """--build NAME=SW=V,SW=V ... -> {NAME: the library built with those switches}."""
    from kernels.flash_attention import api, build

    libraries = {}
    for item in items:
        name, _, switches = item.partition("=")
        defines = build.parse_defines([s for s in switches.split(",") if s])
        libraries[name] = api._Library(build.build(defines=defines))
    return libraries


def step_turns(args) -> dict:
    """Every --flags schedule and cuDNN's FP8 SDPA per shape, interleaved: --reps rounds, each
    timing every callable once in an order balanced for which follows which
    (bench.balanced_orders), so drift (clocks, heat) and one call's effect on the next spread
    over all."""
    from kernels.flash_attention import api

    try:
        import cudnn

        version = str(cudnn.backend_version())
    except Exception as err:
        cudnn, version = None, f"import cudnn: {err}"
    libraries = build_libraries(args.build)
    result = {
        "schedules": [SCHEDULES[f] for f in args.flags],
        "builds": {name: lib.record["defines"] for name, lib in libraries.items()},
        "reps": args.reps,
        "cudnn_backend_version": version,
        "rows": [],
    }
    for label, b, hq, hkv, s, d, causal in shapes(args):
        row = {"label": label, "rounds": {}}
        q = torch.randn(b, hq, s, d, device="cuda")
        k = torch.randn(b, hkv, s, d, device="cuda")
        v = torch.randn(b, hkv, s, d, device="cuda")
        (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
        del q, k, v
        calls = {
            SCHEDULES[f]: partial(api._forward_fp8, q8, k8, v8, causal, d**-0.5, [dq, dk, dv], f)
            for f in args.flags
        }
        for name, library in libraries.items():
            calls.update(
                {
                    f"{name}/{SCHEDULES[f]}": partial(
                        api._forward_fp8, q8, k8, v8, causal, d**-0.5, [dq, dk, dv], f, library
                    )
                    for f in args.flags
                }
            )
        if cudnn is not None:
            try:
                calls["cudnn_fp8"], o_dtype = cudnn_fp8_runner(
                    q8, k8, v8, (dq, dk, dv), causal, d**-0.5
                )
                result["cudnn_o_dtype"] = row["cudnn_o_dtype"] = o_dtype
            except Exception as err:
                row["cudnn_fp8_error"] = f"{type(err).__name__}: {err}"[:400]
        for order in balanced_orders(list(calls), args.reps):
            for name in order:
                if f"{name}_error" in row:
                    continue
                try:
                    ms = time_call(calls[name], args.warmup, args.iters)
                    row["rounds"].setdefault(name, []).append(
                        round(tflops(b, hq, s, d, causal, ms), 1)
                    )
                except Exception as err:
                    row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
        row["median"] = {n: statistics.median(v) for n, v in row["rounds"].items()}
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        save(args, result)
        del calls, q8, k8, v8
        torch.cuda.empty_cache()
    return result


def step_table(paths: list[Path]) -> None:
    data = {}
    for path in paths:
        try:
            data[path.stem] = json.loads(path.read_text())
        except Exception as err:
            print(f"{path.name}: unreadable ({err})")
    correct = data.get("correct", {})
    if correct.get("rows"):
        print("correctness (max |O - float64 on dequantized inputs|):")
        # The schedules that ran (a column each), in SCHEDULES' order.
        ran = [
            label
            for label in SCHEDULES.values()
            if any(f"err_{label}" in r or f"error_{label}" in r for r in correct["rows"])
        ]
        heads = " ".join(f"{SHOWN[label]:>9}" for label in ran)
        print(f"{'case':34} {heads} {'emulated':>9} {'bound':>9}  ok")
        keys = [f"err_{label}" for label in ran] + ["err_emulated", "bound"]
        for r in correct["rows"]:
            case = f"d{r['d']} b{r['b']} h{r['hq']}/{r['hkv']} s{r['s']}"
            case += " causal" if r["causal"] else ""
            cells = [r.get(k) for k in keys]
            # '-': the schedule did not run (its error, if any, is in the row's error_*).
            text = " ".join(f"{c:9.2e}" if isinstance(c, float) else f"{'-':>9}" for c in cells)
            print(f"{case:34} {text}  {r.get('ok')}")
        equal = [v for r in correct["rows"] for k, v in r.items() if k.startswith("bitwise_eq")]
        if equal:
            print(f"O bitwise equal to the first schedule's: {sum(equal)} of {len(equal)}")
        if "aborted" in correct:
            print(f"ABORTED: {correct['aborted']}")
    elif correct:
        print(f"correctness: {correct}")
    timing = {r["label"]: r for r in data.get("time", {}).get("rows", [])}
    cud = {r["label"]: r for r in data.get("cudnn", {}).get("rows", [])}
    if timing or cud:
        version = data.get("cudnn", {}).get("cudnn_backend_version", "-")
        print(
            f"TFLOP/s, 32k tokens a shape (B = 2, S = 16k unless its label says; "
            f"cuDNN backend {version}):"
        )
        print(
            f"{'shape':20} {'fp8 ours':>9} {'no-turns':>9} {'bf16 ours':>9} {'cudnn fp8':>9} "
            f"{'ours/cudnn':>10}"
        )
        for label in dict.fromkeys([*timing, *cud]):
            t, c = timing.get(label, {}), cud.get(label, {})
            cells = [t.get("fp8"), t.get("fp8_no_pingpong"), t.get("bf16"), c.get("cudnn_fp8")]
            ratio = f"{cells[0] / cells[3]:10.3f}" if cells[0] and cells[3] else f"{'-':>10}"
            text = " ".join(f"{x:9.1f}" if isinstance(x, float) else f"{'-':>9}" for x in cells)
            print(f"{label:20} {text} {ratio}")
            for r in (t, c):
                for key, value in r.items():
                    if key.endswith("_error"):
                        print(f"  {key}: {value[:160]}")
    turns = data.get("turns", {})
    if turns.get("rows"):
        print_turns_table(turns)
    elif turns:
        print(f"turns: {turns}")


def print_turns_table(turns: dict) -> None:
    """The `turns` step's medians: each schedule's TFLOP/s, cuDNN's, and the shipped choice
    against the better of the two fixed schedules."""
    built = [f"{b}/{n}" for b in turns.get("builds", {}) for n in turns["schedules"]]
    names = [*turns["schedules"], *built, "cudnn_fp8"]
    version = turns.get("cudnn_backend_version", "-")
    print(
        f"TFLOP/s, 32k tokens a shape (B = 2, S = 16k unless its label says), "
        f"median of {turns['reps']} interleaved rounds "
        f"(cuDNN backend {version}, O {turns.get('cudnn_o_dtype', '-')}):"
    )
    heads = " ".join(f"{SHOWN.get(n, n):>10}" for n in names)
    print(f"{'shape':20} {heads}  auto/best best/cudnn")
    for r in turns["rows"]:
        med = r.get("median", {})
        cells = " ".join(
            f"{med[n]:10.1f}" if isinstance(med.get(n), float) else f"{'-':>10}" for n in names
        )
        fixed = [med.get(n) for n in turns["schedules"] if n != "ours" and med.get(n)]
        best = max([*fixed, med.get("ours") or 0.0])
        auto = f"{med['ours'] / max(fixed):10.3f}" if med.get("ours") and fixed else f"{'-':>10}"
        vs = f"{best / med['cudnn_fp8']:10.3f}" if best and med.get("cudnn_fp8") else f"{'-':>10}"
        print(f"{r['label']:20} {cells} {auto} {vs}")
        for name in built:
            base = name.split("/", 1)[1]
            if med.get(name) and med.get(base):
                print(f"  {name} / {base}: {med[name] / med[base]:.3f}")
        if med.get("ours"):
            each = ", ".join(
                f"{SHOWN.get(n, n)} {med[n] / med['ours']:.3f}"
                for n in turns["schedules"]
                if n != "ours" and med.get(n)
            )
            print(f"  / auto: {each}")
        for key, value in r.items():
            if key.endswith("_error"):
                print(f"  {key}: {value[:160]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("probe", "correct", "time", "cudnn", "turns", "table"))
    parser.add_argument("out", type=Path, nargs="+")
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3, help="turns: interleaved rounds")
    parser.add_argument("--big", action="store_true", help="probe: one 16k shape for ncu")
    parser.add_argument(
        "--seqlens",
        type=int,
        nargs="*",
        default=[],
        help="time, cudnn, turns: these sequence lengths (B x S = 32k tokens) instead of 16k",
    )
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="measurement switch of the library every step runs (build.py; repeatable)",
    )
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME=SW=V,...",
        help="turns: another build of this tree timed beside, its schedules named NAME/... "
        "(switches comma-separated, none after NAME= for the default build; repeatable)",
    )
    parser.add_argument(
        "--flags",
        type=int,
        nargs="*",
        default=[0, FLAG_NO_PINGPONG],
        help="the FP8 schedules (FLASH_FP8_* flags) to run; none: bf16 and cuDNN only",
    )
    args = parser.parse_args(argv)
    if args.step == "table":
        step_table(args.out)
        return 0
    start = time.time()
    if args.define or args.build:
        from kernels.flash_attention import api, build

        if args.build:
            # Two builds of one code base in one process keep their own launcher statics.
            appended = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} {OWN_STATICS_FLAG}".strip()
            os.environ["NVCC_APPEND_FLAGS"] = appended
        api.load_library(defines=build.parse_defines(args.define))
    steps = {
        "probe": step_probe,
        "correct": step_correct,
        "time": step_time,
        "cudnn": step_cudnn,
        "turns": step_turns,
    }
    result = steps[args.step](args)
    result["seconds"] = round(time.time() - start, 1)
    result["device"] = torch.cuda.get_device_name()
    args.out[0].write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
