"""The correctness gate: every implementation against a higher-precision reference.

Each config gets fresh random inputs (seeded from the plan's seed and the config's position).
The error an implementation may have is relative to what plain attention computed in the
inputs' own dtype reaches (two yardsticks: eager matmul-softmax-matmul, as FlashAttention's
tests use, and SDPA's math path), so the gate asks "as accurate as PyTorch in this dtype",
not "under a magic number". Yardsticks are never implementations under test (a broken
kernel must not widen its own tolerance). NaN or Inf in the output never passes.

A kernel that passes must also not be able to fool the timer. On a GPU each implementation
is then captured in a CUDA graph and replayed on fresh inputs, its captured output poisoned
(NaN) first (`graph_probe`): an output cached from an earlier call, work on a stream the
graph never sees, or a partial write leaves NaN or a wrong answer there. The benchmark
checks outputs from its timed loop with `check_output` too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernels import registry
from kernels.reference import expand_kv_heads
from results_schema import AttentionConfig, CorrectnessRow, Plan
from results_schema.models import implementation_of

YARDSTICK_IMPLEMENTATIONS = ("sdpa-math",)  # with same_dtype_attention, they set the tolerance
TOLERANCE_FACTOR = 3.0
REFERENCE_CHUNK_BYTES = 1 << 30  # float64 scores per reference chunk: keeps S=8192 on a 24 GB L4

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


SEED_PURPOSES = (
    "correctness",
    "timing",
    "probe",
    "probe-replay",
    "timed-last",
    "order",
    "profile",
)


def config_seed(plan_seed: int, index: int, purpose: str) -> int:
    """Distinct, reproducible seeds per config and per purpose (SEED_PURPOSES), so that
    every check sees inputs no earlier call saw."""
    offset = SEED_PURPOSES.index(purpose)
    return (plan_seed * 1_000_003 + index * 7919 + offset * 104_729) % 2**63


def make_inputs(config: AttentionConfig, device: torch.device, seed: int):
    """q of shape (B, H, S, D), k and v (B, H_kv, S, D), standard normal: never zeros,
    which hide bugs."""
    generator = torch.Generator(device=device).manual_seed(seed)
    dims = (config.batch, config.seq_len, config.head_dim)
    shapes = [(dims[0], heads, *dims[1:]) for heads in (config.heads, *[config.key_heads] * 2)]
    return tuple(
        torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(
            DTYPES[config.dtype]
        )
        for shape in shapes
    )


def chunked_reference(reference: Callable, q, k, v, causal: bool) -> torch.Tensor:
    """The reference over slices of batch*heads (each is independent), so the float64
    score matrix never needs more than REFERENCE_CHUNK_BYTES at once."""
    b, h, s, d = q.shape
    k, v = expand_kv_heads(q, k), expand_kv_heads(q, v)
    flat = [t.reshape(1, b * h, s, d) for t in (q, k, v)]
    per_head = s * k.shape[-2] * 8
    step = max(1, REFERENCE_CHUNK_BYTES // per_head)
    parts = [
        reference(
            flat[0][:, i : i + step], flat[1][:, i : i + step], flat[2][:, i : i + step], causal
        )
        for i in range(0, b * h, step)
    ]
    return torch.cat(parts, dim=1).reshape(b, h, s, -1)


def same_dtype_attention(q, k, v, causal: bool) -> torch.Tensor:
    """softmax(QK^T / sqrt(D)) V with both products in the inputs' dtype (softmax in float32,
    its result rounded back): the error a straightforward 16-bit attention has."""
    k, v = expand_kv_heads(q, k), expand_kv_heads(q, v)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(diagonal=s_k - s_q)
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)


def unit_roundoff(dtype: str) -> float:
    return float(torch.finfo(DTYPES[dtype]).eps) / 2


def poisoned_call(run: Callable, q, k, v, causal: bool) -> torch.Tensor:
    """Fill a block of output size with NaN and free it just before the call, so the caching
    allocator most likely hands that block to the output: elements the kernel never writes
    stay NaN and fail the check (best effort: the allocator decides)."""
    poison = torch.full_like(q, float("nan"))
    del poison
    return run(q, k, v, causal)


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, int]:
    """(relative L2 error, max abs error, count of non-finite elements), in float64."""
    nonfinite = int((~torch.isfinite(out)).sum().item())
    diff = out.to(torch.float64) - ref
    rel_l2 = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))
    return rel_l2, float(diff.abs().max()), nonfinite


def reference_output(plan: Plan, config: AttentionConfig, inputs: tuple) -> torch.Tensor:
    return chunked_reference(registry.get(plan.reference).run, *inputs, config.causal)


def check_config(
    run_id: str, config: AttentionConfig, plan: Plan, index: int, device: torch.device
) -> list[CorrectnessRow]:
    """One row per identity of the plan; a failure is a row, never an exception."""
    q, k, v = make_inputs(config, device, config_seed(plan.seed, index, "correctness"))
    ref = reference_output(plan, config, (q, k, v))
    measured = {
        name: _measure(name, q, k, v, config, ref, device)
        for name in dict.fromkeys([*YARDSTICK_IMPLEMENTATIONS, *plan.identities])
    }
    yardsticks = [errors(chunked_reference(same_dtype_attention, q, k, v, config.causal), ref)]
    yardsticks += [measured[n][1] for n in YARDSTICK_IMPLEMENTATIONS if measured[n][1]]
    finite = [e[0] for e in yardsticks if e[2] == 0 and math.isfinite(e[0])]
    tolerance = TOLERANCE_FACTOR * max(finite, default=0.0) + unit_roundoff(config.dtype)
    rows = []
    for name in plan.identities:
        backend, result, message = measured[name]
        rows.append(_row(run_id, config, name, backend, result, message, tolerance))
    if device.type == "cuda":
        rows = _graph_probes(run_id, config, plan, index, device, rows)
    return rows


def _graph_probes(run_id, config, plan, index, device, rows) -> list[CorrectnessRow]:
    """Each passing row replaced by its graph probe's row when the probe fails."""
    capture_inputs = make_inputs(config, device, config_seed(plan.seed, index, "probe"))
    replay_inputs = make_inputs(config, device, config_seed(plan.seed, index, "probe-replay"))
    ref = reference_output(plan, config, replay_inputs)
    probed = []
    for row in rows:
        if row.passed:
            run = registry.get(implementation_of(row.implementation)).run
            try:
                out = graph_probe(run, capture_inputs, replay_inputs, config.causal)
            except Exception as exc:  # capture refused the work: it left the calling stream
                out = f"graph capture failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            checked = check_output(run_id, config, row, out, ref, "graph-probe")
            row = row if checked.passed else checked
        probed.append(row)
    return probed


def graph_probe(run: Callable, capture_inputs: tuple, replay_inputs: tuple, causal: bool):
    """The output of one call captured in a CUDA graph, poisoned, then replayed on
    `replay_inputs` written into the captured input buffers."""
    from benches.timing import capture

    copies = tuple(t.clone() for t in capture_inputs)
    graph, out = capture(lambda: run(*copies, causal), 1)
    out.fill_(float("nan"))
    for tensor, value in zip(copies, replay_inputs, strict=True):
        tensor.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    return out


def check_output(
    run_id: str, config: AttentionConfig, gate_row: CorrectnessRow, out, ref, stage: str
) -> CorrectnessRow:
    """An output checked against `ref` with the gate's tolerance, as a row of `stage`; `out`
    is the output, or a message saying why there is none."""
    if isinstance(out, str):
        result, message = None, out
    elif not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        result, message = (
            None,
            f"output {getattr(out, 'shape', out)!r}, expected {tuple(ref.shape)}",
        )
    else:
        result, message = errors(out, ref), ""
    row = _row(
        run_id,
        config,
        gate_row.implementation,
        gate_row.backend,
        result,
        message,
        gate_row.tolerance,
    )
    return row.model_copy(update={"stage": stage, "message": _staged(stage, row.message)})


def _staged(stage: str, message: str) -> str:
    return f"{stage}: {message}" if message else ""


def poison(out) -> None:
    """NaN over an output already checked: returned again unwritten, it fails."""
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        out.fill_(float("nan"))


def _measure(name, q, k, v, config, ref, device):
    impl = registry.get(implementation_of(name))
    reason = impl.available(device)
    if reason is None and hasattr(impl, "unsupported"):  # a user's kernel (user_kernel.py)
        reason = impl.unsupported(config)
    if reason is not None:
        return "unavailable", None, reason
    try:
        backend = impl.backend_for(q, k, v, config.causal)
        out = poisoned_call(impl.run, q, k, v, config.causal)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # a kernel that refuses a shape fails its row, not the run
        return "error", None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if out.shape != ref.shape:
        return backend, None, f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    return backend, errors(out, ref), ""


def _row(run_id, config, name, backend, result, message, tolerance) -> CorrectnessRow:
    common = dict(
        run_id=run_id, config=config.name, implementation=name, backend=backend, tolerance=tolerance
    )
    if result is None:
        return CorrectnessRow(**common, passed=False, message=message)
    rel_l2, max_abs, nonfinite = result
    passed = nonfinite == 0 and rel_l2 <= tolerance
    if nonfinite:
        message = f"{nonfinite} non-finite output elements"
    elif not passed:
        message = f"relative L2 error {rel_l2:.3g} over tolerance {tolerance:.3g}"
    return CorrectnessRow(
        **common,
        passed=passed,
        rel_l2_error=_finite_or_none(rel_l2),
        max_abs_error=_finite_or_none(max_abs),
        nonfinite=nonfinite,
        message=message,
    )


def _finite_or_none(value: float) -> float | None:
    """NaN/Inf errors (from non-finite outputs) are recorded as unknown, not as numbers."""
    return value if math.isfinite(value) else None
