"""Fourth device probe for issue 48 (developer tool): does the driver's IPC (memory
handles both ways, stream memory operations on the legacy default stream) work when the
child runs as another, unprivileged user; and does a raw cuMemAlloc'd buffer freed by the
parent stay readable through a child's old mapping (it should not alias new memory)."""

from __future__ import annotations

import ctypes
import os

U64, SZ = ctypes.c_uint64, ctypes.c_size_t


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def driver():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(U64), ctypes.POINTER(SZ), U64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), U64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(U64), Handle, ctypes.c_uint]
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), SZ]
    lib.cuMemFree_v2.argtypes = [U64]
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, U64, ctypes.c_uint32, ctypes.c_uint]
    return lib


def child(read_fd, write_fd, uid):
    os.setgid(uid)
    os.setuid(uid)
    import torch

    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    lib = driver()
    r, w = os.fdopen(read_fd, "rb", 0), os.fdopen(write_fd, "wb", 0)
    hbytes = r.read(64)
    ptr = U64()
    rc = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), Handle.from_buffer_copy(hbytes), 1)
    w.write(f"open parent's buffer as uid {os.getuid()}: rc={rc}\n".encode())
    if rc:
        return
    w.write(b"step: opened\n")
    out = torch.full((1024,), 7.0, device="cuda")
    torch.cuda.synchronize()
    w.write(b"step: full\n")
    base, size = U64(), SZ()
    lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), out.data_ptr())
    h = Handle()
    rc2 = lib.cuIpcGetMemHandle(ctypes.byref(h), base.value)
    # wait for the parent's flag (first word of its buffer) on the legacy default stream
    w.write(b"step: exported\n")
    stream = torch.cuda.Stream() if os.environ.get("PROBE_STREAM") == "torch" else None
    handle = stream.cuda_stream if stream is not None else None
    rc3 = lib.cuStreamWaitValue32_v2(handle, ptr.value, 1, 0)
    w.write(f"step: wait enqueued rc={rc3}\n".encode())
    if stream is not None:
        torch.cuda.set_stream(stream)
    out.add_(1)
    rc4 = lib.cuStreamWriteValue32_v2(handle, ptr.value + 4, 2, 0)
    w.write(f"export own output rc={rc2}, wait rc={rc3}, write rc={rc4}\n".encode())
    w.write(bytes(h.reserved) + (out.data_ptr() - base.value).to_bytes(8, "little"))
    r.read(1)  # parent done reading
    torch.cuda.synchronize()


def main():
    import pwd

    import torch

    uid = pwd.getpwnam("nobody").pw_uid
    p2c, c2p = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(p2c[1])
        os.close(c2p[0])
        try:
            child(p2c[0], c2p[1], uid)
        finally:
            os._exit(0)
    os.close(p2c[0])
    os.close(c2p[1])
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    lib = driver()
    buf = U64()
    assert lib.cuMemAlloc_v2(ctypes.byref(buf), 1 << 20) == 0
    h = Handle()
    assert lib.cuIpcGetMemHandle(ctypes.byref(h), buf.value) == 0
    torch.cuda.synchronize()
    w, r = os.fdopen(p2c[1], "wb", 0), os.fdopen(c2p[0], "rb", 0)
    w.write(bytes(h.reserved))
    while True:
        line = r.readline().decode().strip()
        print(line, flush=True)
        if (
            not line
            or line.startswith("export")
            or "rc=" in line
            and not line.startswith("step")
            and not line.startswith("open")
        ):
            break
    if "rc=" not in line:
        return
    data = r.read(72)
    flags = torch.as_tensor(
        type(
            "M",
            (),
            {
                "__cuda_array_interface__": {
                    "shape": (2,),
                    "typestr": "<i4",
                    "data": (buf.value, False),
                    "version": 3,
                }
            },
        )(),
        device="cuda",
    )
    flags[0] = 1  # go
    torch.cuda.synchronize()
    import time

    time.sleep(0.5)
    print("child's done flag:", int(flags[1].item()))
    ptr = U64()
    rc = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), Handle.from_buffer_copy(data[:64]), 1)
    off = int.from_bytes(data[64:], "little")
    if rc == 0:
        seen = torch.as_tensor(
            type(
                "M",
                (),
                {
                    "__cuda_array_interface__": {
                        "shape": (1024,),
                        "typestr": "<f4",
                        "data": (ptr.value + off, False),
                        "version": 3,
                    }
                },
            )(),
            device="cuda",
        )
        print("parent reads child's output:", float(seen.sum().item()), "(expect 8192)")
    else:
        print("parent open of child's handle rc=", rc)
    w.write(b"x")
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
