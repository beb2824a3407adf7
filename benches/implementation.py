"""What a registry implementation is (benches/registry.py lists them): its own module, so
that an adapter module (benches/peers.py) can build implementations while the registry is
still being assembled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]
WIDE_AND_HALF_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Implementation:
    """`run` and `backend_for` take q, k, v as `to_native` makes them from the harness's
    [batch, heads, seq, head_dim] tensors (as they are where it is None); `from_native` maps
    run's output back to that layout for the checks (a view will do). The conversions run
    when inputs are prepared and outputs checked, never inside a timed call. Keyword-only,
    so that an implementation adding fields of its own (benches/kernel_tree.py) need not
    give them defaults."""

    name: str
    run: AttentionFn
    backend_for: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], str]
    available: Callable[[torch.device], str | None]  # None if usable, else why not
    to_native: Callable[[tuple], tuple] | None = field(default=None, kw_only=True)
    from_native: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, kw_only=True)
    # The input dtypes `run` takes (an implementation without `unsupported` of its own is
    # refused the others); FP8 ones mean run also takes q_descale, k_descale, v_descale.
    dtypes: tuple[str, ...] = field(default=WIDE_AND_HALF_DTYPES, kw_only=True)
    dtype_note: str = field(default="", kw_only=True)  # why it takes no other: for the row

    def dtype_refusal(self, dtype: str) -> str | None:
        """A config row's reason when `run` does not take `dtype`, else None."""
        if dtype in self.dtypes:
            return None
        note = self.dtype_note or f"{self.name} takes {', '.join(self.dtypes)}"
        return f"unsupported: dtype {dtype} ({note})"

    def native_inputs(self, inputs: tuple) -> tuple:
        """New tensors holding `inputs` ([B, H, S, D]) as `run` takes them: its own
        copies, so that nothing it does reaches the caller's tensors."""
        if self.to_native is None:
            return tuple(t.clone() for t in inputs)
        given = {t.untyped_storage().data_ptr() for t in inputs}
        native = self.to_native(tuple(inputs))  # a view of an input (a no-op) is cloned
        return tuple(t.clone() if t.untyped_storage().data_ptr() in given else t for t in native)

    def bhsd_output(self, out):
        """`run`'s output as [B, H, S, D] (anything that is no tensor passes through, for
        the checks to name)."""
        if self.from_native is None or not isinstance(out, torch.Tensor):
            return out
        return self.from_native(out)


def as_implementation(run: Implementation | AttentionFn) -> Implementation:
    """An implementation as it is, or a bare attention function as one without hooks."""
    if isinstance(run, Implementation):
        return run
    return Implementation("anonymous", run, lambda *a: "unknown", lambda device: None)
