"""The frames between the harness and a kernel's worker process (benches/worker.py,
benches/isolation.py): a JSON object, then one raw frame per tensor it lists. Nothing is
unpickled: the parent reads the child's words as data, checked (`decode_tensor`).

A request may name a spill path in the parent's private folder (`Spill`): the child then
writes each tensor's bytes to `<path>.<i>` instead of the pipe, straight from the GPU into
the mapped file, and the parent maps that file and copies it to its device. Measured on an
H100 (2026-11-27): the outputs of the default plan's worker (the gate's two calls, the
graph probe, the timed checks; about 2 GB) took 6.2 s of a first result's 34 s through the
pipe, copied six times on the way. The parent reads only the names it chose, as regular
files of exactly the described size.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import shutil
import stat
import tempfile
import weakref

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


def described(descriptor: dict) -> tuple[torch.dtype, list[int], int]:
    """(dtype, shape, bytes) of a child's tensor descriptor; a ValueError if it is not one."""
    dtype = DTYPES.get(descriptor.get("dtype")) if isinstance(descriptor, dict) else None
    shape = descriptor.get("shape") if dtype is not None else None
    if (
        dtype is None
        or not isinstance(shape, list)
        or not all(isinstance(n, int) and n >= 0 for n in shape)
    ):
        raise ValueError(f"bad tensor descriptor {str(descriptor)[:100]}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return dtype, shape, count * torch.empty((), dtype=dtype).element_size()


def decode_tensor(descriptor: dict, raw: bytes, device: torch.device) -> torch.Tensor:
    """The tensor `encode_tensor` described, on `device`; a descriptor that does not match
    its bytes is a ValueError (the child is not trusted to describe them right)."""
    dtype, shape, size = described(descriptor)
    if size != len(raw):
        raise ValueError(f"tensor of shape {shape} does not match its {len(raw)} bytes")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0)
    return flat.view(dtype).reshape(shape).to(device)


def send_reply(conn, reply: dict, tensors: tuple = (), spill: str | None = None) -> None:
    """The reply, its tensors written to `spill`'s files where the request named one (the
    pipe where it did not, or where writing them failed)."""
    if spill and tensors:
        try:
            descriptors = [write_spilled(t, f"{spill}.{i}") for i, t in enumerate(tensors)]
        except OSError:  # a full /dev/shm, say: the pipe still carries them
            for i in range(len(tensors)):
                with contextlib.suppress(OSError):
                    os.unlink(f"{spill}.{i}")
        else:
            conn.send_bytes(json.dumps({**reply, "tensors": descriptors, "spilled": True}).encode())
            return
    frames = [encode_tensor(t) for t in tensors]
    conn.send_bytes(json.dumps({**reply, "tensors": [d for d, _ in frames]}).encode())
    for _, raw in frames:
        conn.send_bytes(raw)


def write_spilled(tensor: torch.Tensor, path: str) -> dict:
    """The child's side: `tensor`'s bytes in a new file at `path`, copied from its device
    into the file's mapping; returns its descriptor."""
    source = tensor.detach()
    size = source.numel() * source.element_size()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        if size:
            with mmap.mmap(fd, size) as mapped:
                target = torch.frombuffer(mapped, dtype=torch.uint8)
                target.view(source.dtype).view(source.shape).copy_(source)
                del target  # the mapping closes only once no tensor holds it
    finally:
        os.close(fd)
    return {"dtype": str(source.dtype).removeprefix("torch."), "shape": list(source.shape)}


def read_spilled(path: str, descriptor: dict, device: torch.device) -> torch.Tensor:
    """The parent's side: the tensor `descriptor` describes, from the file at `path` (a
    regular file, not a link, of exactly the described size, or a ValueError), on `device`."""
    dtype, shape, size = described(descriptor)
    try:  # not blocking: a FIFO left there must not hold the parent at its open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"no tensor file: {exc.strerror}") from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size != size:
            raise ValueError(f"tensor of shape {shape} does not match its {found.st_size} bytes")
        if not size:
            return torch.empty(shape, dtype=dtype, device=device)
        # Private and writable: torch maps no read-only buffer; nothing writes to it.
        with mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE) as mapped:
            flat = torch.frombuffer(mapped, dtype=torch.uint8)
            tensor = flat.view(dtype).view(shape).to(device, copy=True)
            del flat
        return tensor
    finally:
        os.close(fd)


class Spill:
    """The parent's private folder for one worker's spilled tensors (tmpfs where the
    machine has one), made at the first request that uses it and removed with the worker
    or at exit. `path()` names a new request's files; `forget` removes them once read.
    Where no folder can be made, or the child cannot write there, the pipe carries them."""

    def __init__(self) -> None:
        self._folder: str | None = None
        self._count = 0

    def path(self) -> str | None:
        """A new request's path, or None (the pipe, then) where no folder can be made."""
        if self._folder is None:
            try:
                self._folder = tempfile.mkdtemp(prefix="bench-frames-", dir=_spill_root())
            except OSError:
                return None
            weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._count += 1
        return os.path.join(self._folder, f"r{self._count}")

    @staticmethod
    def forget(path: str, count: int) -> None:
        for i in range(count):
            with contextlib.suppress(OSError):
                os.unlink(f"{path}.{i}")

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _spill_root() -> str | None:
    """/dev/shm where it is a writable folder (memory, not disk), else the temp folder."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None
