"""Real sockets: small replicas (asyncio HTTP servers in a thread) and what the router tests build
routes of (a module of its own: ``from conftest import`` names whichever conftest loaded last)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx

from kiban.serving.router.table import Endpoint, Route

TOKEN = "secret-token"


class FakeReplica:
    """An HTTP/1.1 replica that answers by path, counting what it got.

    ``/v2/echo``: JSON of its name, path, query, headers and body; ``?ms=N`` waits first.
    ``/openai/v1/stream``: two SSE events; the second only after ``release`` is set.
    ``first_chunk`` is set when the first chunk of a chunked request body has arrived.
    ``/v2/big?mb=N``: N MiB of body. ``/v2/digest``: JSON of the body's size and SHA-256.
    With ``close_after_answer`` it closes each connection after its answer (nothing pooled).
    ``/v2/die``: closes the connection without an answer. ``/v2/die-mid``: half an answer.
    With ``unix_path`` it listens on that Unix socket too (``unix_address``).
    """

    def __init__(
        self, name: str, unix_path: str | None = None, *, close_after_answer: bool = False
    ) -> None:
        self.name = name
        self.close_after_answer = close_after_answer
        self.unix_path = unix_path
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[str] = []
        self.release = threading.Event()
        self.first_chunk = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._unix_server: asyncio.Server | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def unix_address(self) -> str:
        assert self.unix_path is not None
        return f"unix:{self.unix_path}"

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def listen() -> None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            if self.unix_path is not None:
                self._unix_server = await asyncio.start_unix_server(self._serve, self.unix_path)

        self.loop.run_until_complete(listen())
        started.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, target, _ = lines[0].split(" ")
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding") == "chunked":
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                        chunk = await reader.readexactly(size + 2)
                        if size == 0:
                            break
                        body += chunk[:-2]
                        self.first_chunk.set()
                self.requests += 1
                self.bodies.append(body.decode())
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    keep = await self._answer(method, target, headers, body, writer)
                finally:
                    self.in_flight -= 1
                if not keep or self.close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if parts.path == "/v2/die":
            return False
        if parts.path == "/v2/die-mid":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
            await writer.drain()
            return False
        if parts.path == "/openai/v1/stream":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for n in range(2):
                if n == 1:
                    await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 30)
                event = f"data: event {n}\n\n".encode()
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if parts.path == "/v2/big":
            size = int(query["mb"][0]) << 20
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            block = b"x" * (1 << 16)
            for _ in range(size >> 16):
                writer.write(block)
                await writer.drain()
            return True
        if parts.path == "/v2/digest":
            digest = json.dumps({"size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
            closing = "connection: close\r\n" if self.close_after_answer else ""
            writer.write(
                f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{closing}"
                f"content-length: {len(digest)}\r\n\r\n{digest}".encode()
            )
            await writer.drain()
            return True
        if "ms" in query:
            await asyncio.sleep(int(query["ms"][0]) / 1000)
        payload = json.dumps(
            {
                "replica": self.name,
                "method": method,
                "path": parts.path,
                "query": parts.query,
                "headers": headers,
                "body": body.decode(),
            }
        ).encode()
        head = (
            f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}"
        )
        writer.write(head.encode() + b"\r\n\r\n" + (b"" if method == "HEAD" else payload))
        await writer.drain()
        return True

    def stop(self) -> None:
        async def shut() -> None:
            for server in (self._server, self._unix_server):
                if server is not None:
                    server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(shut(), self.loop)
        self._thread.join(5)
        self.loop.close()


def closed_port_address() -> str:
    """An address nothing listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def route(*endpoints: Endpoint, **kwargs: object) -> Route:
    """A public route of ``team/svc`` over the endpoints' revisions (100% to the first)."""
    traffic = kwargs.pop("traffic", None) or {endpoints[0].revision: 100}
    options: dict[str, object] = {"public": True, **kwargs}
    return Route("team", "svc", traffic, tuple(endpoints), **options)  # type: ignore[arg-type]


def ready(replica: FakeReplica | str, revision: str = "v1") -> Endpoint:
    address = replica if isinstance(replica, str) else replica.address
    return Endpoint(revision, address, True)


@contextlib.contextmanager
def raw_connection(port: int) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        yield sock
    finally:
        sock.close()


def in_background(
    call: Callable[[], httpx.Response],
) -> tuple[threading.Thread, list[httpx.Response]]:
    """Run ``call`` in a thread; its answer is in the list once the thread is joined."""
    out: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    return thread, out
