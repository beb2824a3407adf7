"""The frames between the harness and a kernel's worker process (benches/worker.py,
benches/isolation.py): a JSON object, then one raw frame per tensor it lists. Nothing is
unpickled: the parent reads the child's words as data, checked (`decode_tensor`).
"""

from __future__ import annotations

import json

import numpy as np
import torch

READY = "ready"  # the worker's first frame, once its kernel's tree is set up

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def encode_tensor(tensor: torch.Tensor) -> tuple[dict, bytes]:
    """(descriptor, raw bytes) of a tensor, copied to the host."""
    host = tensor.detach().to("cpu").contiguous()
    raw = host.view(torch.uint8).numpy().tobytes() if host.numel() else b""
    return {"dtype": str(host.dtype).removeprefix("torch."), "shape": list(host.shape)}, raw


def decode_tensor(descriptor: dict, raw: bytes, device: torch.device) -> torch.Tensor:
    """The tensor `encode_tensor` described, on `device`; a descriptor that does not match
    its bytes is a ValueError (the child is not trusted to describe them right)."""
    dtype = DTYPES.get(descriptor.get("dtype"))
    shape = descriptor.get("shape")
    if (
        dtype is None
        or not isinstance(shape, list)
        or not all(isinstance(n, int) and n >= 0 for n in shape)
    ):
        raise ValueError(f"bad tensor descriptor {str(descriptor)[:100]}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count * torch.empty((), dtype=dtype).element_size() != len(raw):
        raise ValueError(f"tensor of shape {shape} does not match its {len(raw)} bytes")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0)
    return flat.view(dtype).reshape(shape).to(device)


def send_reply(conn, reply: dict, tensors: tuple = ()) -> None:
    frames = [encode_tensor(t) for t in tensors]
    conn.send_bytes(json.dumps({**reply, "tensors": [d for d, _ in frames]}).encode())
    for _, raw in frames:
        conn.send_bytes(raw)
