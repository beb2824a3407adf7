"""What crosses between the harness and a kernel's worker: JSON frames only, bounded
(benches/wire.py); buffers the parent lends, which the child maps (benches/shared_buffers.py);
descriptors of GPU memory, which the parent checks before it reads any
(benches/cuda_ipc.py). The child is not trusted to describe anything right."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading

import pytest
import torch

from benches import cuda_ipc, wire
from benches.shared_buffers import Borrowed, Lender


def test_a_frame_that_is_not_a_json_object_or_too_large_is_refused():
    parent, child = multiprocessing.Pipe()
    child.send_bytes(b"[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        wire.read_reply(parent)
    child.send_bytes(b"not json")
    with pytest.raises(ValueError):
        wire.read_reply(parent)

    def send_too_much() -> None:
        with contextlib.suppress(OSError):  # the parent closes its end once it refused
            child.send_bytes(b" " * (wire.MAX_FRAME_BYTES + 1))

    sender = threading.Thread(target=send_too_much)
    sender.start()  # a pipe holds less than that: the child blocks until the parent reads
    with pytest.raises(OSError):
        wire.read_reply(parent)
    parent.close()
    sender.join(timeout=60)


def _borrow_and_answer(descriptors, conn):
    borrowed = Borrowed(torch.device("cpu"))
    q, out = (borrowed.tensor(d) for d in descriptors)
    out.copy_(q * 2)
    conn.send_bytes(str(float(q.sum())).encode())
    borrowed.close()


@pytest.mark.slow
def test_a_lent_buffer_is_the_same_memory_in_the_child_and_gone_once_freed():
    lender = Lender(torch.device("cpu"))
    q = torch.randn(2, 3, 5, 8)
    lent_q, lent_out = lender.lend(q), lender.lend(torch.full_like(q, float("nan")))
    parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_borrow_and_answer, args=([lent_q.descriptor, lent_out.descriptor], child)
    )
    process.start()
    assert float(parent.recv_bytes().decode()) == pytest.approx(float(q.sum()), rel=1e-6)
    process.join(timeout=60)
    assert torch.equal(lent_out.tensor, q * 2)  # written there by the child, read here
    assert torch.equal(lent_q.tensor, q)
    paths = [lent_q.descriptor["path"], lent_out.descriptor["path"]]
    assert all(os.path.exists(p) for p in paths)
    lent_q.free()
    lent_out.free()
    assert not any(os.path.exists(p) for p in paths)
    folder = lender._folder
    lender.close()
    assert not os.path.exists(folder)


def _descriptor(**change) -> dict:
    good = {
        "handle": "ab" * 64,
        "offset": 0,
        "shape": [2, 3],
        "strides": [3, 1],
        "dtype": "float16",
    }
    return {**good, **change}


@pytest.mark.parametrize(
    "bad",
    [
        {"handle": "ab" * 10},  # not a 64-byte handle
        {"handle": "zz" * 64},
        {"offset": -4},
        {"shape": [2, -3]},
        {"strides": [3]},  # a stride short
        {"dtype": "Tensor"},  # an attribute of torch that is no dtype
        {"dtype": "__class__"},
        {"shape": "2x3"},
    ],
)
def test_a_descriptor_that_is_not_one_is_refused(bad):
    with pytest.raises(cuda_ipc.IpcError):
        cuda_ipc.Descriptor.from_json(_descriptor(**bad))


def test_a_descriptor_says_how_far_its_tensor_reaches():
    described = cuda_ipc.Descriptor.from_json(_descriptor(offset=10))
    assert described.extent() == (1 * 3 + 2 * 1 + 1) * 2  # last element at 5, float16
    transposed = cuda_ipc.Descriptor.from_json(_descriptor(shape=[3, 2], strides=[1, 3]))
    assert transposed.extent() == 12
    assert cuda_ipc.Descriptor.from_json(described.to_json()) == described
