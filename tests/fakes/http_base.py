"""A threaded loopback HTTP server that lives in a background thread.

Both stand-ins (compute, metadata) share this so that each only writes its routes.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class _QuietThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    # Test runs open many short connections at once (parallel deletes, retries).
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (a killed controller, a test's closed socket) is not a
        # server error: no traceback for it. Anything else is still printed.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class JsonHandler(BaseHTTPRequestHandler):
    """Parses the request once and offers small reply helpers."""

    protocol_version = "HTTP/1.1"
    # A reply leaves in two writes (headers, then body): with Nagle's algorithm on, the body
    # waited for the client's delayed ACK of the headers, 40 ms a request on loopback
    # (44 ms against 1 ms measured; the suite makes a few thousand requests).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines would drown pytest output; the servers record requests instead.
        pass

    def _parse(self) -> None:
        split = urlsplit(self.path)
        self.url_path = split.path
        self.query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        self.raw_body = self.rfile.read(length) if length else b""

    def json_body(self) -> Any:
        return json.loads(self.raw_body) if self.raw_body else None

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, status: int, payload: Any) -> None:
        self.reply(status, json.dumps(payload).encode(), "application/json; charset=UTF-8")

    def reply_text(self, status: int, text: str) -> None:
        self.reply(status, text.encode(), "application/text")

    def handle_request(self) -> None:  # overridden by subclasses
        raise NotImplementedError

    def _dispatch(self) -> None:
        self._parse()
        self.handle_request()

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _dispatch


class BackgroundHttpServer:
    """Owns a ThreadingHTTPServer on 127.0.0.1 with a free port, serving from a thread."""

    def __init__(self, handler_class: type[JsonHandler]) -> None:
        self._handler_class = handler_class
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, owner: Any) -> None:
        self._httpd = _QuietThreadingServer(("127.0.0.1", 0), self._handler_class)
        # Handlers reach their stand-in through the server object.
        self._httpd.owner = owner  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class LoopbackStandIn:
    """A stand-in on its own loopback port: start()/stop() or a context manager. Requests
    or answers it found outside Google's discovery schema land in `schema_violations`, and
    stop() then fails the test that drove it."""

    handler_class: type[JsonHandler]

    def __init__(self) -> None:
        self.schema_violations: list[str] = []
        self._http = BackgroundHttpServer(self.handler_class)

    @property
    def endpoint(self) -> str:
        return self._http.base_url

    def start(self) -> Any:
        self._http.start(self)
        return self

    def stop(self) -> None:
        self._http.stop()
        if self.schema_violations:
            raise AssertionError(
                f"{type(self).__name__}: outside the discovery schema: "
                + "; ".join(self.schema_violations)
            )

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
