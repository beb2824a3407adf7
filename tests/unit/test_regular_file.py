"""Reading a file something else may have put in place (orchestrator/regular_file.py): a
regular file is read up to one byte past its bound; a link (to a regular file or nowhere),
a folder and a FIFO are refused, the FIFO without waiting for a writer."""

from __future__ import annotations

import os

import pytest

from orchestrator.regular_file import NotRegularFileError, open_regular, read_regular


def test_a_regular_file_is_read_up_to_one_byte_past_its_bound(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_regular(path, 100) == b"0123456789"
    assert read_regular(path, 4) == b"01234"  # the caller sees it is larger than 4
    fd = open_regular(path)
    try:
        assert os.read(fd, 3) == b"012"
    finally:
        os.close(fd)


def test_what_is_not_a_regular_file_is_refused_and_nothing_waits(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")  # a plain open() would wait here for a writer, forever
    for name in ("link", "dangling", "folder", "fifo"):
        with pytest.raises(NotRegularFileError):
            read_regular(tmp_path / name, 100)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent", 100)
