"""The app behind a real uvicorn on a free port, in a thread, and raw HTTP requests to it.

For what an in-process client cannot send: request targets exactly as written (``..``,
``%2F``, ``//``), which httpx would normalize but uvicorn passes on decoded, as ``kiban up``
does.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from kiban.testing import eventually


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: str


@dataclass(frozen=True)
class LiveServer:
    host: str
    port: int

    def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> RawAnswer:
        """Send ``method target`` as written (no normalization) and read the whole answer."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.putrequest(method, target, skip_accept_encoding=True)
            for name, value in {**(headers or {}), "Content-Length": str(len(body or b""))}.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            answer = connection.getresponse()
            text = answer.read().decode(errors="replace")
            return RawAnswer(answer.status, {k.lower(): v for k, v in answer.getheaders()}, text)
        finally:
            connection.close()


@contextmanager
def serve_in_thread(app: FastAPI) -> Iterator[LiveServer]:
    """Serve ``app`` with uvicorn (as ``kiban up`` configures it) until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError("uvicorn ended before it started")
        return server.started

    eventually(started, what="uvicorn to start", timeout=30, interval=0.02)
    try:
        yield LiveServer(host, port)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
