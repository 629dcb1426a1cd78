"""A lean HTTP/1.1 load generator for the benchmarks (their percentiles: ``kiban.stats``).

Why not httpx here: client and server share the machine's cores, and with 32 connections
httpx's AsyncClient spent 3.5 to 4.4 ms of CPU per submission where prepared requests over
asyncio streams spend about 0.07 ms (measured side by side on a 2-core machine); httpx would
have taken the server's CPU and measured the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit


class BenchError(RuntimeError):
    """The benchmark could not run (a server did not start, a request failed, ...)."""


# -- numbers ---------------------------------------------------------------------------------
def as_ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# -- a lean HTTP/1.1 client ------------------------------------------------------------------
class HttpConnection:
    """One keep-alive HTTP/1.1 connection; requests are prepared bytes, answers are parsed once.

    Only what the benchmark needs: ``Content-Length`` bodies, no redirects, no chunking.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, url: str) -> HttpConnection:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send one prepared request and return the status and the body of its answer.

        A connection the server closed or reset is a ``BenchError`` saying so (an
        ``IncompleteReadError`` is an ``EOFError``, which a Typer command reports as "Aborted.").
        """
        try:
            return await self._exchange(request)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise BenchError(
                f"the server closed a keep-alive connection mid-request ({type(exc).__name__})"
            ) from exc

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise BenchError("the server answered with a chunked body; not supported here")
        body = await self._reader.readexactly(length) if length else b""
        return status, body

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()


def prepare_request(
    method: str, url: str, path: str, token: str, body: dict[str, Any] | None = None
) -> bytes:
    host = urlsplit(url).netloc
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Authorization: Bearer {token}"]
    payload = b""
    if body is not None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
