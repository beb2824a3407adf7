"""The frames between the harness and a kernel's worker process (benches/worker.py,
benches/isolation.py): one JSON object each, nothing else. No tensor crosses the pipe (the
parent lends the inputs and reads the outputs where they lie: benches/shared_buffers.py)
and nothing is unpickled: the parent reads the child's words as data, bounded and checked
(`read_reply`).
"""

from __future__ import annotations

import json

READY = "ready"  # the worker's first frame, once its kernel's tree is set up
MAX_FRAME_BYTES = 1 << 20  # a reply holds a few descriptors and numbers


def send_reply(conn, reply: dict) -> None:
    conn.send_bytes(json.dumps(reply).encode())


def read_reply(conn) -> dict:
    """The child's next frame as a JSON object; a ValueError if it is not one (or is larger
    than any honest reply)."""
    frame = conn.recv_bytes(MAX_FRAME_BYTES)
    reply = json.loads(frame)
    if not isinstance(reply, dict):
        raise ValueError("reply is not a JSON object")
    return reply
