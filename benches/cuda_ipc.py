"""GPU memory one process hands another: the CUDA driver's IPC calls, through ctypes.

The harness and a kernel's worker (benches/worker.py) share memory both ways without
torch's pickling: the parent's input buffers go to the worker, and the worker's outputs
come back to be read where they lie (benches/bracket.py). torch's own sharing keeps
reference counts in files of the producer's and pools the memory in its caching allocator,
so a buffer the worker once saw could later hold the harness's own tensors: every buffer
the parent shares is a driver allocation of its own (`DeviceBuffer`), freed only when its
placement ends and never reused for anything else.

A handle travels as JSON (`Descriptor`); the receiver opens it, learns the allocation's
real size from the driver, and refuses a view that would reach past it: the worker's
descriptors are untrusted.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

_U64, _SIZE = ctypes.c_uint64, ctypes.c_size_t
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
# The array-interface type of an element of each width: torch reads bfloat16 through it
# as int16 and views the result back (numpy's type strings have no bfloat16).
_CARRIER = {
    1: ("<i1", torch.int8),
    2: ("<i2", torch.int16),
    4: ("<i4", torch.int32),
    8: ("<i8", torch.int64),
}


class IpcError(RuntimeError):
    """A driver call refused, or a descriptor that does not fit its allocation."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


@functools.cache
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(_U64), ctypes.POINTER(_SIZE), _U64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), _U64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(_U64), _Handle, ctypes.c_uint]
    lib.cuIpcCloseMemHandle.argtypes = [_U64]
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(_U64), _SIZE]
    lib.cuMemFree_v2.argtypes = [_U64]
    # Stream memory operations, the V2 entry points: available on every platform without
    # the driver's NVreg_EnableStreamMemOPs (CUDA driver API, "Stream Memory Operations":
    # https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, _U64, ctypes.c_uint32, ctypes.c_uint]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise IpcError(f"{what} failed (CUDA driver error {rc})")


# CU_STREAM_WAIT_VALUE_GEQ: the stream waits until (int32_t)(*addr - value) >= 0, so a
# counter may wrap. CU_STREAM_WRITE_VALUE_DEFAULT: the write is preceded by a memory fence,
# so what the stream wrote before it is visible to whoever it releases.
_WAIT_VALUE_GEQ = 0x0
_WRITE_VALUE_DEFAULT = 0x0


def wait_until_at_least(stream: torch.cuda.Stream, pointer: int, value: int) -> None:
    """`stream`'s later work waits until the 32-bit counter at device address `pointer`
    reaches `value` (enqueued; the host goes on at once)."""
    rc = _driver().cuStreamWaitValue32_v2(
        stream.cuda_stream, pointer, value & 0xFFFFFFFF, _WAIT_VALUE_GEQ
    )
    _check(rc, "cuStreamWaitValue32")


def write_counter(stream: torch.cuda.Stream, pointer: int, value: int) -> None:
    """`stream` writes `value` to the 32-bit counter at `pointer` once its earlier work is
    done (enqueued)."""
    rc = _driver().cuStreamWriteValue32_v2(
        stream.cuda_stream, pointer, value & 0xFFFFFFFF, _WRITE_VALUE_DEFAULT
    )
    _check(rc, "cuStreamWriteValue32")


_CURRENT: set[int] = set()


def _current(device: torch.device) -> None:
    """The device's primary context current on this thread, as the driver calls need (an
    allocation makes torch create it where nothing else has yet)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_device(index)
    if index not in _CURRENT:
        torch.zeros(1, device=torch.device("cuda", index))
        _CURRENT.add(index)


def allocation_of(pointer: int) -> tuple[int, int]:
    """(base, size) of the driver allocation holding `pointer`."""
    base, size = _U64(), _SIZE()
    _check(
        _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer),
        "cuMemGetAddressRange",
    )
    return base.value, size.value


@dataclass(frozen=True)
class Descriptor:
    """A tensor in a shared allocation: the allocation's handle, where the tensor starts in
    it (bytes), its shape, strides (elements) and dtype."""

    handle: bytes
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype

    def to_json(self) -> dict:
        return {
            "handle": self.handle.hex(),
            "offset": self.offset,
            "shape": list(self.shape),
            "strides": list(self.strides),
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    @classmethod
    def from_json(cls, data: dict) -> Descriptor:
        """The descriptor `data` says, or IpcError if it is not one (untrusted input)."""
        try:
            dtype = getattr(torch, str(data["dtype"]))
            shape = tuple(int(n) for n in data["shape"])
            strides = tuple(int(n) for n in data["strides"])
            handle = bytes.fromhex(str(data["handle"]))
            offset = int(data["offset"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IpcError(f"not a tensor descriptor: {type(exc).__name__}") from None
        if (
            not isinstance(dtype, torch.dtype)
            or len(handle) != 64
            or len(shape) != len(strides)
            or min((*shape, *strides, offset), default=0) < 0
        ):
            raise IpcError("not a tensor descriptor")
        return cls(handle, offset, shape, strides, dtype)

    def extent(self) -> int:
        """Bytes from the tensor's start to the end of its last element."""
        size = torch.empty((), dtype=self.dtype).element_size()
        if any(n == 0 for n in self.shape):
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True)) + 1) * size


def describe(tensor: torch.Tensor, handles: dict[int, bytes] | None = None) -> Descriptor:
    """How another process finds `tensor` (memory of a driver allocation of this process).
    `handles` caches each allocation's handle by its base address."""
    base, _ = allocation_of(tensor.data_ptr())
    if handles is None or base not in handles:
        handle = _Handle()
        _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
        if handles is None:
            return _described(tensor, bytes(handle.reserved), base)
        handles[base] = bytes(handle.reserved)
    return _described(tensor, handles[base], base)


def _described(tensor: torch.Tensor, handle: bytes, base: int) -> Descriptor:
    return Descriptor(
        handle, tensor.data_ptr() - base, tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype
    )


def tensor_at(
    pointer: int, shape, strides, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A tensor over device memory at `pointer` (no copy); the memory must outlive it."""
    size = torch.empty((), dtype=dtype).element_size()
    typestr, carrier = _CARRIER[size]

    class _Interface:
        __cuda_array_interface__ = {
            "shape": tuple(shape),
            "strides": tuple(s * size for s in strides),
            "typestr": typestr,
            "data": (pointer, False),
            "version": 3,
        }

    view = torch.as_tensor(_Interface(), device=device)
    return view if carrier is dtype else view.view(dtype)


class Mappings:
    """The other process's allocations this one has opened, by handle: each opened once
    (the driver refuses a second open) and closed together (`close`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._opened: dict[bytes, tuple[int, int]] = {}

    def tensor(self, descriptor: Descriptor) -> torch.Tensor:
        """The tensor `descriptor` names; IpcError where it would reach outside its
        allocation."""
        base, size = self._open(descriptor.handle)
        reach = descriptor.offset + descriptor.extent()
        if reach > size:
            raise IpcError(
                f"a tensor of shape {list(descriptor.shape)} reaching {reach} bytes into an "
                f"allocation of {size}"
            )
        return tensor_at(
            base + descriptor.offset,
            descriptor.shape,
            descriptor.strides,
            descriptor.dtype,
            self.device,
        )

    def _open(self, handle: bytes) -> tuple[int, int]:
        if handle not in self._opened:
            _current(self.device)
            pointer = _U64()
            rc = _driver().cuIpcOpenMemHandle_v2(
                ctypes.byref(pointer), _Handle.from_buffer_copy(handle), _LAZY_PEER_ACCESS
            )
            _check(rc, "cuIpcOpenMemHandle")
            self._opened[handle] = allocation_of(pointer.value)
        return self._opened[handle]

    def close(self) -> None:
        for base, _ in self._opened.values():
            _driver().cuIpcCloseMemHandle(base)
        self._opened.clear()


class DeviceBuffer:
    """A driver allocation of this process's own, shared with a worker: never pooled, so
    memory a worker was handed never holds anything else of the harness's."""

    def __init__(self, shape, dtype: torch.dtype, device: torch.device) -> None:
        _current(device)
        nbytes = max(1, int(torch.empty(shape, dtype=dtype, device="meta").nbytes))
        pointer = _U64()
        _check(_driver().cuMemAlloc_v2(ctypes.byref(pointer), nbytes), "cuMemAlloc")
        self._pointer = pointer.value
        strides = torch.empty(shape, dtype=dtype, device="meta").stride()
        self.tensor = tensor_at(self._pointer, shape, strides, dtype, device)
        self.descriptor = describe(self.tensor)

    def free(self) -> None:
        if self._pointer:
            torch.cuda.synchronize(self.tensor.device)
            self.tensor = None
            _driver().cuMemFree_v2(self._pointer)
            self._pointer = 0

    def __del__(self) -> None:  # a placement that was never closed (an error path)
        try:
            self.free()
        except Exception:
            pass
