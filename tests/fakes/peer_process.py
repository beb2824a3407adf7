"""Which fake VM is calling? Maps a loopback TCP peer to the caller's process session.

The unrouted metadata URL is one address for every fake VM, as on GCE, where the network
tells VMs apart. Here every VM runs in its own session, so the server finds the process that
owns the client socket (/proc/net/tcp, then /proc/PID/fd) and reads its session id. Linux only.
"""

from __future__ import annotations

import os


def _socket_inode(client_port: int, server_port: int) -> str | None:
    local = f"0100007F:{client_port:04X}"
    remote = f"0100007F:{server_port:04X}"
    try:
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                if fields[1] == local and fields[2] == remote:
                    return fields[9]
    except OSError:
        return None
    return None


def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name may hold spaces and parentheses: split after the last ")".
            after_name = stat.read().rsplit(")", 1)[1].split()
        return int(after_name[3])
    except (OSError, IndexError, ValueError):
        return None


def session_of_peer(client_port: int, server_port: int) -> int | None:
    """The session id of the local process connected from `client_port`, if found."""
    inode = _socket_inode(client_port, server_port)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return _session_of(pid)
            except OSError:
                continue
    return None
