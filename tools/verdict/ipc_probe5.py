"""Fifth device probe for issue 48 (developer tool): does a kernel launched behind a
stream memory wait that is not yet satisfied block the host? (a) a wait on the process's
own memory; (b) a wait on another process's memory mapped through IPC; (c) a wait on own
memory that the other process writes through its IPC mapping."""

from __future__ import annotations

import ctypes
import os
import time

U64, SZ = ctypes.c_uint64, ctypes.c_size_t


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def driver():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), U64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(U64), Handle, ctypes.c_uint]
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), SZ]
    lib.cuMemsetD32_v2.argtypes = [U64, ctypes.c_uint, SZ]
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, U64, ctypes.c_uint32, ctypes.c_uint]
    return lib


def alloc(lib):
    buf = U64()
    assert lib.cuMemAlloc_v2(ctypes.byref(buf), 4096) == 0
    assert lib.cuMemsetD32_v2(buf.value, 0, 1024) == 0
    return buf.value


def handle_of(lib, ptr):
    h = Handle()
    assert lib.cuIpcGetMemHandle(ctypes.byref(h), ptr) == 0
    return bytes(h.reserved)


def open_handle(lib, data):
    ptr = U64()
    assert lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), Handle.from_buffer_copy(data), 1) == 0
    return ptr.value


def timed_launch(torch, lib, stream, wait_addr, x):
    assert lib.cuStreamWaitValue32_v2(stream.cuda_stream, wait_addr, 1, 0) == 0
    start = time.perf_counter()
    with torch.cuda.stream(stream):
        x.add_(1)
        x.add_(1)
    return (time.perf_counter() - start) * 1e3


def main():
    import torch

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(w1)
        os.close(r2)
        rd, wr = os.fdopen(r1, "rb", 0), os.fdopen(w2, "wb", 0)
        torch.zeros(1, device="cuda")
        lib = driver()
        own = alloc(lib)
        wr.write(handle_of(lib, own))
        parents = open_handle(lib, rd.read(64))
        x = torch.zeros(1 << 20, device="cuda")
        stream = torch.cuda.Stream()
        # (b) wait on the parent's memory
        ms_b = timed_launch(torch, lib, stream, parents, x)
        wr.write(f"(b) child waits on parent's mapped memory: launch took {ms_b:.1f} ms\n".encode())
        stream.synchronize()
        # (c) wait on its own memory, which the parent writes through its mapping
        ms_c = timed_launch(torch, lib, stream, own, x)
        wr.write(
            f"(c) child waits on own memory written by the parent: launch took {ms_c:.1f} ms\n".encode()  # noqa: E501 (a table's row)
        )
        stream.synchronize()
        wr.write(f"child done, x[0]={x[0].item()}\n".encode())
        os._exit(0)
    os.close(r1)
    os.close(w2)
    wr, rd = os.fdopen(w1, "wb", 0), os.fdopen(r2, "rb", 0)
    torch.zeros(1, device="cuda")
    lib = driver()
    own = alloc(lib)
    wr.write(handle_of(lib, own))
    childs = open_handle(lib, rd.read(64))
    x = torch.zeros(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    other = torch.cuda.Stream()
    # (a) wait on own memory, released 0.5 s later from another stream
    assert lib.cuStreamWaitValue32_v2(s.cuda_stream, own + 64, 1, 0) == 0
    start = time.perf_counter()
    with torch.cuda.stream(s):
        x.add_(1)
    ms_a = (time.perf_counter() - start) * 1e3
    time.sleep(0.2)
    print(
        f"(a) parent waits on own memory: launch took {ms_a:.1f} ms; done before release? {s.query()}",  # noqa: E501 (a table's row)
        flush=True,
    )
    assert lib.cuStreamWriteValue32_v2(other.cuda_stream, own + 64, 1, 0) == 0
    s.synchronize()
    print("(a) released by a write from another stream", flush=True)
    time.sleep(1.0)
    assert lib.cuStreamWriteValue32_v2(other.cuda_stream, own, 1, 0) == 0  # releases (b)
    print(rd.readline().decode().strip(), flush=True)
    time.sleep(1.0)
    assert lib.cuStreamWriteValue32_v2(other.cuda_stream, childs, 1, 0) == 0  # releases (c)
    other.synchronize()
    print(rd.readline().decode().strip(), flush=True)
    print(rd.readline().decode().strip(), flush=True)
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
