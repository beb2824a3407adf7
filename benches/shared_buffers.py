"""Buffers the harness owns and lends a kernel's worker: the inputs it calls on and, on the
CPU, the output slots it copies its answers into. The harness keeps its own copy of every
input, so whatever the worker writes into a lent buffer changes nothing it judges by.

GPU: a driver allocation of the parent's (benches/cuda_ipc.py), named to the worker by
its IPC handle. CPU: a file in the parent's private folder on tmpfs, mapped by both.
A descriptor (JSON) is how the worker finds a buffer; the worker trusts the parent's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref

import torch

from benches import cuda_ipc

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn,
}


class Lender:
    """The parent's side for one worker: makes buffers to lend (`lend`), and reads the
    worker's GPU outputs where they lie (`outputs`). `close` frees what is left."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._folder: str | None = None
        self._count = 0
        self.outputs = cuda_ipc.Mappings(device) if device.type == "cuda" else None

    def lend(self, like: torch.Tensor) -> Lent:
        """A new buffer of `like`'s shape and dtype, holding a copy of `like` by the time
        this returns: the worker reads it from another process, which no stream of ours
        orders (a copy left queued behind the parent's float64 reference reached the worker
        half done: our kernel failed its graph probe on 5 of 13 default configs, an H200,
        2026-11-29)."""
        if self.device.type == "cuda":
            buffer = cuda_ipc.DeviceBuffer(tuple(like.shape), like.dtype, self.device)
            lent = Lent(buffer.tensor, buffer.descriptor.to_json(), buffer.free)
        else:
            lent = self._file(like)
        lent.tensor.copy_(like)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return lent

    def lend_copies(self, like: torch.Tensor, copies: int) -> list[Lent]:
        """`copies` buffers holding a copy of `like` each, as `lend` makes one. On the GPU
        they lie in one allocation, made, filled and waited for once, which the worker
        opens once: a graph sample's 256 queries, an allocation, a wait and an open each,
        cost a graph placement ~50 ms more than in process (the default plan, an H200,
        2026-11-29). They are freed together: the first frees the allocation."""
        if self.device.type != "cuda" or copies == 1:
            return [self.lend(like) for _ in range(copies)]
        buffer = cuda_ipc.DeviceBuffer((copies, *like.shape), like.dtype, self.device)
        buffer.tensor.copy_(like.expand(copies, *like.shape))
        torch.cuda.current_stream(self.device).synchronize()
        handles: dict[int, bytes] = {}
        lent = []
        for index, tensor in enumerate(buffer.tensor.unbind(0)):
            descriptor = cuda_ipc.describe(tensor, handles).to_json()
            lent.append(Lent(tensor, descriptor, buffer.free if index == 0 else None))
        return lent

    def _file(self, like: torch.Tensor) -> Lent:
        if self._folder is None:
            root = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
            self._folder = tempfile.mkdtemp(prefix="bench-lent-", dir=root)
            weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._count += 1
        path = os.path.join(self._folder, f"b{self._count}")
        size = max(1, like.numel())
        with open(path, "wb") as f:
            f.truncate(size * like.element_size())
        flat = torch.from_file(path, shared=True, size=size, dtype=like.dtype)
        tensor = flat[: like.numel()].view(like.shape)
        descriptor = {"path": path, "shape": list(like.shape), "dtype": _name(like.dtype)}
        return Lent(tensor, descriptor, lambda: _unlink(path))

    def close(self) -> None:
        if self.outputs is not None:
            self.outputs.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


class _Counter:
    """A 32-bit counter, zero at first, in an allocation of the parent's lent to a GPU
    worker (`descriptor`); nothing once freed."""

    def __init__(self, device: torch.device) -> None:
        self._buffer = cuda_ipc.DeviceBuffer((1,), torch.int32, device)
        self._buffer.tensor.zero_()
        torch.cuda.current_stream(device).synchronize()  # zero before the worker can look
        self.descriptor = self._buffer.descriptor.to_json()

    def _pointer(self) -> int | None:
        tensor = self._buffer.tensor
        return None if tensor is None else tensor.data_ptr()

    def free(self) -> None:
        self._buffer.free()


class GoCounter(_Counter):
    """The parent's go to a GPU worker's calls (benches/bracket.py). A call is asked for with
    the counter's next value (`arm`); the worker's stream waits until the counter reaches
    it, then calls. The parent's stream writes the value (`release`) behind the bracket's
    start, the fresh queries and the flush."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.armed = 0  # the latest value a call was asked for with
        self.released = 0  # the latest value the parent's stream was given to write

    def arm(self) -> int:
        """The value the next call waits for: each call's its own, so that a value written
        later also releases a call left waiting earlier (the wait is "at least")."""
        self.armed += 1
        return self.armed

    def release(self) -> None:
        """Every call armed so far may start once the parent's stream reaches this point
        (nothing, once freed: the worker it was lent to has ended)."""
        pointer = self._pointer()
        if pointer is None:
            return
        stream = torch.cuda.current_stream(self._buffer.tensor.device)
        cuda_ipc.write_counter(stream, pointer, self.armed)
        self.released = self.armed


class DoneCounter(_Counter):
    """A GPU worker's word that a call's work is over: the worker's stream writes the call's
    go value here after the call, and the parent's stream waits for it (`wait`) before it
    reads the output's rows and takes its end event, so that no host poll lies inside the
    bracket. Memory crosses users where an interprocess event does not (cuIpcOpenMemHandle
    between users works, an event's handle does not: H200, 2026-11-29), so a worker confined
    as its tree's user is bracketed the same way. A worker that dies or hangs mid-call
    would leave the parent's stream waiting: the parent then writes the value itself
    (`force`), from a stream of its own that nothing waits on."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self._side = torch.cuda.Stream(device)  # torch's pool streams do not block on others

    def wait(self, value: int) -> None:
        """The parent's stream waits here until the worker has written `value`."""
        stream = torch.cuda.current_stream(self._buffer.tensor.device)
        cuda_ipc.wait_until_at_least(stream, self._pointer(), value)

    def force(self, value: int) -> None:
        """The parent's stream released from its wait for `value` without the worker."""
        pointer = self._pointer()
        if pointer is not None:
            cuda_ipc.write_counter(self._side, pointer, value)
            self._side.synchronize()


class Lent:
    """A lent buffer: the parent's view, its descriptor for the worker, and how to free it."""

    def __init__(self, tensor: torch.Tensor, descriptor: dict, free) -> None:
        self.tensor, self.descriptor, self._free = tensor, descriptor, free

    def free(self) -> None:
        self.tensor = None
        if self._free is not None:
            self._free()
            self._free = None


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fill_fresh(tensors: list[torch.Tensor], seed: int, descale: torch.Tensor | None = None) -> None:
    """Standard normal values from `seed` in `tensors` (all of one shape and dtype): a
    sample's fresh queries, drawn by the parent, which copies them into the lent buffers
    inside its bracket and keeps them for its reference. One draw for all and one grouped
    copy: a graph sample refreshes up to 256 queries, which a draw and a copy each made 512
    launches.
    FP8 queries (`descale`: the placement's q descale) are the draws divided by it and
    rounded to e4m3: the standard normal queries the descale stands for."""
    first = tensors[0]
    generator = torch.Generator(device=first.device).manual_seed(seed)
    values = torch.randn(
        (len(tensors), *first.shape), generator=generator, device=first.device, dtype=torch.float32
    )
    if descale is not None:  # FP8: quantized with the placement's q descale, as the first
        largest = torch.finfo(first.dtype).max
        values = (values / descale.to(values.device)).clamp(-largest, largest)
    torch._foreach_copy_(tensors, list(values.to(first.dtype).unbind(0)))


class Borrowed:
    """The worker's side: the parent's buffers it was lent for one placement or request,
    opened from their descriptors and closed together."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._mappings = cuda_ipc.Mappings(device) if device.type == "cuda" else None

    def tensor(self, descriptor: dict) -> torch.Tensor:
        if self._mappings is not None:
            return self._mappings.tensor(cuda_ipc.Descriptor.from_json(descriptor))
        shape, dtype = [int(n) for n in descriptor["shape"]], DTYPES[descriptor["dtype"]]
        count = 1
        for n in shape:
            count *= n
        flat = torch.from_file(descriptor["path"], shared=True, size=max(1, count), dtype=dtype)
        return flat[:count].view(shape)

    def close(self) -> None:
        if self._mappings is not None:
            self._mappings.close()
