"""The frames a kernel's worker answers with (benches/wire.py): tensors written by the
child into files the parent named, read back exactly, and refused when they are not what
the reply describes (the child is not trusted to describe them right)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
import torch

from benches import wire


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(2, 3, 5, 8).to(torch.float16),
        torch.randn(2, 3, 5, 8).to(torch.bfloat16),
        torch.randn(4, 6).t(),  # not contiguous: written in its logical order
        torch.empty(0, 4),
        torch.tensor(1.5, dtype=torch.float64),
    ],
    ids=["float16", "bfloat16", "transposed", "empty", "scalar"],
)
def test_a_spilled_tensor_reads_back_bit_for_bit(tmp_path, tensor):
    path = str(tmp_path / "r1.0")
    descriptor = wire.write_spilled(tensor, path)
    back = wire.read_spilled(path, descriptor, torch.device("cpu"))
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    as_bytes = [t.contiguous().view(-1).view(torch.uint8) for t in (back, tensor)]
    assert torch.equal(*as_bytes)
    os.unlink(path)  # the mapping is gone: the tensor read back is a copy
    assert torch.equal(back, tensor)


def test_a_spilled_file_that_is_not_what_the_reply_says_is_refused(tmp_path):
    tensor = torch.ones(4, 8, dtype=torch.float16)
    path = str(tmp_path / "r1.0")
    descriptor = wire.write_spilled(tensor, path)
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="does not match its 64 bytes"):
        wire.read_spilled(path, {"dtype": "float16", "shape": [4, 9]}, cpu)
    with pytest.raises(ValueError, match="bad tensor descriptor"):
        wire.read_spilled(path, {"dtype": "int8", "shape": [64]}, cpu)
    link = str(tmp_path / "r2.0")
    os.symlink(path, link)  # a link the child left where the parent looks: not followed
    with pytest.raises(ValueError, match="no tensor file"):
        wire.read_spilled(link, descriptor, cpu)
    with pytest.raises(ValueError, match="no tensor file"):
        wire.read_spilled(str(tmp_path / "r3.0"), descriptor, cpu)
    os.mkfifo(str(tmp_path / "r4.0"))
    with pytest.raises(ValueError, match="does not match"):
        wire.read_spilled(str(tmp_path / "r4.0"), descriptor, cpu)


def test_the_spill_folder_is_private_and_removed_on_close():
    spill = wire.Spill()
    first, second = spill.path(), spill.path()
    folder = os.path.dirname(first)
    assert os.path.dirname(second) == folder and first != second
    assert os.stat(folder).st_mode & 0o077 == 0  # the parent's alone
    wire.write_spilled(torch.ones(3), f"{first}.0")
    wire.Spill.forget(first, 1)
    assert os.listdir(folder) == []
    wire.write_spilled(torch.ones(3), f"{second}.0")
    spill.close()
    assert not os.path.exists(folder)


def test_a_child_that_cannot_write_the_files_sends_its_tensors_down_the_pipe(tmp_path):
    parent, child = multiprocessing.Pipe()
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    wire.send_reply(child, {"backend": "x"}, (tensor,), str(tmp_path / "gone" / "r1"))
    header = json.loads(parent.recv_bytes())
    assert "spilled" not in header and header["backend"] == "x"
    back = wire.decode_tensor(header["tensors"][0], parent.recv_bytes(), torch.device("cpu"))
    assert torch.equal(back, tensor)
    assert not (tmp_path / "gone").exists()
