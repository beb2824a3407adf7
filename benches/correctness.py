"""The correctness gate: every implementation against a higher-precision reference.

Each config gets fresh random inputs (seeded from the plan's secret seed and the config's
position) and a float64 reference. The rules, the same for our kernels, SDPA and a user's:

- Tolerance, flash-attention's own rule: an implementation passes when its max error
  against the reference is at most twice that of plain attention computed in the inputs'
  own dtype (`same_dtype_attention`: eager matmul-softmax-matmul, as FlashAttention's tests
  use), plus eps = one ulp of the largest output (2 unit roundoffs x max|ref|), so that an
  exact yardstick (S=1) leaves room for one rounding. The gate asks "as accurate as plain
  attention in this dtype", not "under a magic number", and no implementation under test
  sets its own tolerance (a broken kernel must not widen it). In float32 and float64 the
  tolerance is at least 32 unit roundoffs x sqrt(keys) x max|ref| (`WIDE_ROUNDOFFS_PER_SQRT_KEY`):
  a reordered sum is no error there.
- NaN is no wildcard: wherever the reference is finite the output must be finite (one NaN
  or Inf fails the row). Our inputs are standard normal, so the reference is finite
  everywhere; a non-finite reference element would have to be matched by the output's.
- The call must leave q, k and v unchanged, and its output must own its memory: not a view
  of an input, not the buffer its previous call returned (each implementation is called
  twice on the same inputs). It must be a tensor of q's shape, dtype and device (the
  reference implementation answers in float64, its purpose).
- Awkward lengths: each config is also checked at S = 127 and 129 with its other
  dimensions (`AWKWARD_SEQ_LENS`); a failure there fails the config's row, "at S=127: ...".
- A kernel that raises fails its row with the first line of its error; nothing else is lost.

A kernel that passes must also not be able to fool the timer. On a GPU each implementation
is then captured in a CUDA graph and replayed on fresh inputs, its captured output poisoned
(NaN) first (`graph_probe`): an output cached from an earlier call, work on a stream the
graph never sees, or a partial write leaves NaN or a wrong answer there. The benchmark
checks outputs from its timed loop with `check_output` too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benches import fp8, registry
from benches.reference import expand_kv_heads
from results_schema import AttentionConfig, CorrectnessRow, Plan
from results_schema.models import UNAVAILABLE_BACKEND, implementation_of

PLAIN_ATTENTION_FACTOR = 2.0  # flash-attention's: twice plain same-dtype attention's error
EPS_UNIT_ROUNDOFFS = 2.0  # eps in unit roundoffs of the largest output: one ulp
# Flash-attention's rule is for 16-bit kernels. In 32 and 64 bits plain attention's two
# library products are nearly exact, while a tiled kernel (SDPA's efficient backend, a
# user's) sums the keys in another order, whose rounding grows like sqrt(keys) roundoffs:
# on an H100, SDPA's own fp32 backends failed "twice plain attention" at S=256. So wide
# dtypes get this floor too: still orders of magnitude under a real bug's error (a wrong
# mask or tail is off by ~1e-1).
WIDE_DTYPES = ("float32", "float64")
WIDE_ROUNDOFFS_PER_SQRT_KEY = 32.0
AWKWARD_SEQ_LENS = (127, 129)  # one under and one over a power of two: tails of every tile
REFERENCE_CHUNK_BYTES = 1 << 30  # float64 scores per reference chunk: keeps S=8192 on a 24 GB L4
INPUT_NAMES = ("q", "k", "v")

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3fn": fp8.E4M3,
}


SEED_PURPOSES = (
    "correctness",
    "timing",
    "probe",
    "probe-replay",
    "timed-last",
    "order",
    "profile",
    "awkward",
)


def config_seed(plan_seed: int, index: int, purpose: str) -> int:
    """Distinct, reproducible seeds per config and per purpose (SEED_PURPOSES), so that
    every check sees inputs no earlier call saw."""
    offset = SEED_PURPOSES.index(purpose)
    return (plan_seed * 1_000_003 + index * 7919 + offset * 104_729) % 2**63


def make_inputs(config: AttentionConfig, device: torch.device, seed: int):
    """q of shape (B, H, S, D), k and v (B, H_kv, S, D), standard normal: never zeros,
    which hide bugs. Drawn in float32, then rounded to the config's dtype, or for FP8
    quantized per tensor with a descale each (benches/fp8.py: a QuantizedInputs)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    dims = (config.batch, config.seq_len, config.head_dim)
    shapes = [(dims[0], heads, *dims[1:]) for heads in (config.heads, *[config.key_heads] * 2)]
    drawn = tuple(
        torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
        for shape in shapes
    )
    if fp8.is_fp8(config.dtype):
        return fp8.quantized_inputs(drawn)
    return tuple(t.to(DTYPES[config.dtype]) for t in drawn)


def output_dtype(config: AttentionConfig) -> torch.dtype:
    """The dtype an implementation answers in: the inputs', but bfloat16 for FP8 inputs."""
    return fp8.OUTPUT_DTYPE if fp8.is_fp8(config.dtype) else DTYPES[config.dtype]


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
    """Of the output's dtype (bfloat16 for FP8 inputs)."""
    name = "bfloat16" if fp8.is_fp8(dtype) else dtype
    return float(torch.finfo(DTYPES[name]).eps) / 2


def poisoned_call(run: Callable, q, k, v, causal: bool, **descales) -> torch.Tensor:
    """Fill a block of output size with NaN and free it just before the call, so the caching
    allocator most likely hands that block to the output: elements the kernel never writes
    stay NaN and fail the check (best effort: the allocator decides)."""
    poison = torch.full(q.shape, float("nan"), dtype=torch.float32, device=q.device)
    del poison
    return run(q, k, v, causal, **descales)


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, int]:
    """(relative L2 error, max abs error, count of elements non-finite where the reference
    is finite), in float64. A NaN left in the difference makes both errors NaN: never a pass."""
    nonfinite = int((~torch.isfinite(out) & torch.isfinite(ref)).sum().item())
    diff = out.to(torch.float64) - ref
    rel_l2 = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))
    return rel_l2, float(diff.abs().max()), nonfinite


def reference_output(plan: Plan, config: AttentionConfig, inputs: tuple) -> torch.Tensor:
    """The reference on `inputs`; on FP8 inputs, on the values they stand for (dequantized:
    the quantization is the config's, not a kernel's error)."""
    if isinstance(inputs, fp8.QuantizedInputs):
        inputs = inputs.dequantized()
    return chunked_reference(registry.get(plan.reference).run, *inputs, config.causal)


def plain_attention(config: AttentionConfig, inputs: tuple) -> torch.Tensor:
    """Plain attention in the precision an implementation of `config` works in: the inputs'
    dtype, or FP8's (benches/fp8.py plain_fp8_attention, descales bound)."""
    if isinstance(inputs, fp8.QuantizedInputs):
        descales = dict(zip(fp8.DESCALE_NAMES, inputs.descales, strict=True))

        def low_precision(q, k, v, causal):
            return fp8.plain_fp8_attention(q, k, v, causal, **descales)

        return chunked_reference(low_precision, *inputs, config.causal)
    return chunked_reference(same_dtype_attention, *inputs, config.causal)


def max_error_tolerance(config: AttentionConfig, inputs: tuple, ref: torch.Tensor) -> float:
    """Twice plain same-dtype attention's max error (FP8: plain FP8 attention's, on the same
    quantized inputs), plus one ulp of the largest output; in 32 and 64 bits at least the
    rounding a reordered sum over the keys may add."""
    plain = plain_attention(config, inputs)
    plain_error = float((plain.to(torch.float64) - ref).abs().max())
    largest = float(ref.abs().max())
    eps = EPS_UNIT_ROUNDOFFS * unit_roundoff(config.dtype) * largest
    tolerance = PLAIN_ATTENTION_FACTOR * plain_error + eps
    if config.dtype in WIDE_DTYPES:
        keys = inputs[1].shape[-2]
        floor = WIDE_ROUNDOFFS_PER_SQRT_KEY * unit_roundoff(config.dtype) * math.sqrt(keys)
        tolerance = max(tolerance, floor * largest)
    return tolerance


def check_config(
    run_id: str,
    config: AttentionConfig,
    plan: Plan,
    index: int,
    device: torch.device,
    names: list[str] | None = None,
) -> list[CorrectnessRow]:
    """One row per identity of the plan (or of `names`, a repro's few); a failure is a
    row, never an exception."""
    names = plan.identities if names is None else names
    seed = config_seed(plan.seed, index, "correctness")
    tolerance, measured = _check_shape(config, plan, seed, device, names)
    rows = [_row(run_id, config, name, *measured[name], tolerance) for name in names]
    rows = _awkward_lengths(run_id, config, plan, index, device, rows)
    if device.type == "cuda":
        rows = _graph_probes(run_id, config, plan, index, device, rows)
    return rows


def _check_shape(config, plan, seed, device, names) -> tuple[float, dict]:
    """The tolerance and each implementation's (backend, errors, message) on fresh inputs
    of `config`'s shape. The tolerance is set before any implementation runs: one that
    writes into its inputs must not move its own yardstick."""
    inputs = make_inputs(config, device, seed)
    ref = reference_output(plan, config, inputs)
    tolerance = max_error_tolerance(config, inputs, ref)
    measured = {
        n: _measure(n, inputs, seed, config, ref, plan.reference) for n in dict.fromkeys(names)
    }
    return tolerance, measured


def _awkward_lengths(run_id, config, plan, index, device, rows) -> list[CorrectnessRow]:
    """Each passing row checked again at every AWKWARD_SEQ_LENS length (the config's other
    dimensions kept); a failure there fails the row, its message saying at which length."""
    for seq_len in AWKWARD_SEQ_LENS:
        passing = [r.implementation for r in rows if r.passed]
        if seq_len == config.seq_len or not passing:
            continue
        awkward = config.model_copy(update={"seq_len": seq_len})
        seed = config_seed(plan.seed, index, "awkward") + seq_len
        tolerance, measured = _check_shape(awkward, plan, seed, device, passing)
        rows = [_at_length(row, run_id, awkward, measured, tolerance) for row in rows]
    return rows


def _at_length(row, run_id, awkward, measured, tolerance) -> CorrectnessRow:
    if row.implementation not in measured:
        return row
    checked = _row(run_id, awkward, row.implementation, *measured[row.implementation], tolerance)
    if checked.passed:
        return row
    message = f"at S={awkward.seq_len}: {checked.message}"
    return row.model_copy(update={"passed": False, "message": message})


def _graph_probes(run_id, config, plan, index, device, rows) -> list[CorrectnessRow]:
    """Each passing row replaced by its graph probe's row when the probe fails."""
    seeds = (config_seed(plan.seed, index, "probe"), config_seed(plan.seed, index, "probe-replay"))
    capture_inputs, replay_inputs = (make_inputs(config, device, seed) for seed in seeds)
    ref = reference_output(plan, config, replay_inputs)
    probed = []
    for row in rows:
        if row.passed:
            impl = registry.get(implementation_of(row.implementation))
            if hasattr(impl, "probe"):  # a user's kernel: probed in its worker process
                out = impl.probe(config, capture_inputs, replay_inputs)
            else:
                out = _local_probe(impl, capture_inputs, replay_inputs, config.causal)
            checked = check_output(run_id, config, row, out, ref, "graph-probe")
            row = row if checked.passed else checked
        probed.append(row)
    return probed


def _local_probe(impl, capture_inputs, replay_inputs, causal):
    try:
        return graph_probe(impl, capture_inputs, replay_inputs, causal)
    except Exception as exc:  # capture refused the work: it left the calling stream
        return f"graph capture failed: {one_line(exc)}"


def graph_probe(
    run: registry.Implementation | Callable, capture_inputs: tuple, replay_inputs: tuple, causal
):
    """The output of one call captured in a CUDA graph, poisoned, then replayed on
    `replay_inputs` written into the captured input buffers (both in the implementation's
    layout); returned as [B, H, S, D]."""
    from benches.timing import capture

    impl = registry.as_implementation(run)
    copies = impl.native_inputs(capture_inputs)
    descales = fp8.descales_of(capture_inputs)  # FP8: rewritten for the replay too
    graph, out = capture(lambda: impl.run(*copies, causal, **descales), 1)
    out.fill_(float("nan"))
    for tensor, value in zip(copies, impl.native_inputs(replay_inputs), strict=True):
        tensor.copy_(value)
    for name, value in fp8.descales_of(replay_inputs).items():
        descales[name].copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    return impl.bhsd_output(out)


def check_output(
    run_id: str, config: AttentionConfig, gate_row: CorrectnessRow, out, ref, stage: str
) -> CorrectnessRow:
    """An output checked against `ref` with the gate's tolerance, as a row of `stage`; `out`
    is the output, or a message saying why there is none."""
    problem = out if isinstance(out, str) else output_problem(out, ref.shape, None, ref.device)
    result = None if problem else errors(out, ref)
    row = _row(
        run_id,
        config,
        gate_row.implementation,
        gate_row.backend,
        result,
        problem or "",
        gate_row.tolerance,
    )
    return row.model_copy(update={"stage": stage, "message": _staged(stage, row.message)})


def checked_row(
    run_id: str, config: AttentionConfig, gate_row: CorrectnessRow, calls: int, worst, stage: str
) -> CorrectnessRow:
    """The row of a worker's placement at `stage`: every one of its `calls` timed calls was
    checked where the harness read it (benches/row_checks.py), `worst` their largest
    error; a failure had ended its part already."""
    return CorrectnessRow(
        run_id=run_id,
        config=config.name,
        implementation=gate_row.implementation,
        backend=gate_row.backend,
        tolerance=gate_row.tolerance,
        passed=True,
        max_abs_error=worst,
        stage=stage,
        message=f"{calls} timed calls checked, rows read where the harness lent the output",
    )


def _staged(stage: str, message: str) -> str:
    return f"{stage}: {message}" if message else ""


def poison(out) -> None:
    """NaN over an output already checked: returned again unwritten, it fails."""
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        out.fill_(float("nan"))


@dataclass(frozen=True)
class TwoCalls:
    """Two calls' outputs, as [B, H, S, D], that passed the checks made where they live."""

    backend: str
    first: torch.Tensor
    second: torch.Tensor


@dataclass(frozen=True)
class CallProblem:
    """Why two calls have no outputs to measure: an exception, or a check they failed."""

    backend: str
    message: str


def two_calls(impl, inputs: tuple, causal: bool, dtype) -> TwoCalls | CallProblem:
    """Two calls on copies of `inputs` in the implementation's layout: the second shows an
    output buffer handed out again; the copies, compared afterwards with the untouched
    originals in that layout, show a write into them. Runs where the implementation runs
    (here, or in a user kernel's worker process: benches/worker.py)."""
    device = inputs[0].device
    try:
        originals = impl.native_inputs(inputs)
        given = tuple(t.clone() for t in originals)
        descales = fp8.descales_of(inputs)  # FP8 inputs' descales, as keyword arguments
        backend = impl.backend_for(*given, causal)
        first = poisoned_call(impl.run, *given, causal, **descales)
        second = poisoned_call(impl.run, *given, causal, **descales)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first, second = impl.bhsd_output(first), impl.bhsd_output(second)
    except Exception as exc:  # a kernel that refuses a shape fails its row, not the run
        return CallProblem("error", one_line(exc))
    problem = (
        output_problem(first, inputs[0].shape, dtype, device)
        or output_problem(second, inputs[0].shape, dtype, device)
        or aliasing_problem(first, given, None)
        or aliasing_problem(second, given, first)
        or modified_input(given, originals)
    )
    return CallProblem(backend, problem) if problem else TwoCalls(backend, first, second)


def _measure(name, inputs, seed, config, ref, reference_name):
    """(backend, errors, message) of `two_calls` on the seed's inputs, the errors taken
    here against the reference. A user's kernel makes those calls in its worker process
    (benches/isolation.py), on copies of the inputs lent to it."""
    impl = registry.get(implementation_of(name))
    reason = _unavailable(impl, config, ref.device)
    if reason is not None:
        return UNAVAILABLE_BACKEND, None, reason
    if hasattr(impl, "gate"):  # a user's kernel in its worker process
        outcome = impl.gate(config, inputs)
    else:
        # The reference answers in float64: that is what it is for.
        dtype = ref.dtype if implementation_of(name) == reference_name else output_dtype(config)
        outcome = two_calls(impl, inputs, config.causal, dtype)
    if isinstance(outcome, CallProblem):
        return outcome.backend, None, outcome.message
    problem = output_problem(outcome.first, ref.shape, None, ref.device) or output_problem(
        outcome.second, ref.shape, None, ref.device
    )
    if problem:
        return outcome.backend, None, problem
    return outcome.backend, _worse(errors(outcome.first, ref), errors(outcome.second, ref)), ""


def _unavailable(impl, config, device) -> str | None:
    reason = impl.available(device)
    if reason is None and hasattr(impl, "unsupported"):  # a user's kernel, a peer
        reason = impl.unsupported(config)
    elif reason is None:  # SDPA and the reference: the dtypes they take
        reason = impl.dtype_refusal(config.dtype)
    return reason


def one_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def output_problem(out, shape, dtype, device) -> str | None:
    """Why `out` is not a tensor of `shape`, `dtype` (unless None) and `device`, if it is not."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.shape != shape:
        return f"output shape {tuple(out.shape)}, expected {tuple(shape)}"
    if dtype is not None and out.dtype != dtype:
        return f"output dtype {out.dtype}, expected {dtype}"
    if out.device != device:
        return f"output on {out.device}, expected {device}"
    return None


def aliasing_problem(out, inputs: tuple, previous) -> str | None:
    """An output sharing memory with an input, or with the previous call's output: the
    caller would see it change under its feet (and a cached answer could pass as new)."""
    for name, tensor in zip(INPUT_NAMES, inputs, strict=True):
        if _shares_memory(out, tensor):
            return f"returned a view of its input {name}"
    if previous is not None and _shares_memory(out, previous):
        return "returned the same buffer as its previous call"
    return None


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the storages behind `a` and `b` overlap (a view shares its base's storage)."""
    sa, sb = a.untyped_storage(), b.untyped_storage()
    if a.device != b.device or not sa.nbytes() or not sb.nbytes():
        return False
    start_a, start_b = sa.data_ptr(), sb.data_ptr()
    return start_a < start_b + sb.nbytes() and start_b < start_a + sa.nbytes()


def modified_input(given: tuple, originals: tuple) -> str | None:
    for name, after, before in zip(INPUT_NAMES, given, originals, strict=True):
        if not torch.equal(after, before):
            return f"modified its input {name}"
    return None


def _worse(a: tuple, b: tuple) -> tuple:
    """Of two calls' errors, the one with more non-finite elements, then the larger max error."""
    return max(a, b, key=lambda e: (e[2], e[1]))


def _row(run_id, config, name, backend, result, message, tolerance) -> CorrectnessRow:
    common = dict(
        run_id=run_id, config=config.name, implementation=name, backend=backend, tolerance=tolerance
    )
    if result is None:
        return CorrectnessRow(**common, passed=False, message=message)
    rel_l2, max_abs, nonfinite = result
    passed = nonfinite == 0 and max_abs <= tolerance
    if nonfinite:
        message = f"{nonfinite} non-finite output elements where the reference is finite"
    elif not passed:
        message = f"max error {max_abs:.3g} over tolerance {tolerance:.3g}"
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
