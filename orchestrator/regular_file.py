"""Reading a file something else may have put in place: a run's folder, a store's object, a
user's tree. Opened without following a symbolic link (the last name; a caller that takes a
path inside a tree checks the folders above it) and without blocking, should a FIFO stand
where the file was, then checked to be a regular file on the very descriptor that is read:
nothing can be swapped in between the check and the read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFileError(OSError):
    """The name is a symbolic link, a folder, a FIFO, a device or a socket."""


def open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file at `path`. Raises FileNotFoundError where
    nothing is, NotRegularFileError where something else is, OSError as os.open does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link
            raise NotRegularFileError(errno.ELOOP, "a symbolic link", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
    return fd


def read_regular(path: Path, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes of the regular file at `path` (open_regular's errors):
    one byte more than allowed, so that a caller tells a larger file by the length, unread
    beyond it."""
    with os.fdopen(open_regular(path), "rb") as file:
        return file.read(max_bytes + 1)
