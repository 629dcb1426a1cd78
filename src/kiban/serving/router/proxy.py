"""The HTTP/1.1 proxy's client side: a connection that parses requests and runs one exchange
(``exchange.py``) per request it carries, in order.

Why not an ASGI app and an HTTP client: at 50 concurrent clients the router must add well
under a millisecond, which leaves no room for per-request tasks, timers, header objects and
body copies. Here httptools parses the client's request (callbacks, in C); the request head is
rebuilt for the replica (prefix stripped, hop-by-hop headers and the bearer token dropped) and
the body forwarded as it arrives; what came in one read goes out in one write, head included.
The replica's answer is passed through as raw bytes, as it arrives, with ``x-kiban-revision``
inserted after the status line; a second httptools parser only watches it to learn where it
ends. A request is handled without a task when a pooled connection to the replica is idle.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import httptools

from kiban.serving.router.dispatcher import Dispatcher
from kiban.serving.router.exchange import Exchange
from kiban.serving.router.messages import error_response


class ClientConnection:
    """One client's keep-alive connection: parses its requests, answers them in order.

    An ``asyncio.Protocol`` by its methods, not by inheritance: a class with a Python base
    cannot be compiled to a native class (see ``native``).
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._connections = dispatcher.connections
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._parsing: Exchange | None = None
        self.active: Exchange | None = None
        """The exchange being answered (the others wait in ``_pending``, not yet begun)."""
        self._pending: list[Exchange] = []
        self._closed = False
        self._paused = 0
        """Pauses asked by flow control: a replica not taking what is written to it."""
        self._body_full: Exchange | None = None
        """The exchange holding more of its request's body than it may buffer, if any."""
        self._reading_paused = False
        self.feeding = False
        """In ``data_received``: a request sent now may have more bytes in the same read."""
        self._holding: Exchange | None = None
        self.waiting_since = time.monotonic()
        """Since when no request of it is in flight (``sweeper`` closes it after a while)."""
        self.head_since: float | None = None
        """When the first byte of a request not yet whole came (None: none is coming)."""

    # -- asyncio callbacks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.active is None and self.head_since is None:
            self.head_since = time.monotonic()
        self.feeding = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail_parse("protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._fail_parse(f"malformed request: {exc}")
        self.feeding = False
        holding = self._holding
        if holding is not None:
            self._holding = None
            holding.release_held()

    def eof_received(self) -> bool | None:
        return None  # the client is done sending: close our side too, as Protocol's default

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._connections.discard(self)
        if self.active is not None:
            self.active.client_lost()
        self._pending.clear()

    def pause_writing(self) -> None:
        if self.active is not None and self.active.upstream is not None:
            self.active.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.active is not None and self.active.upstream is not None:
            self.active.upstream.resume_reading()

    # -- httptools callbacks -------------------------------------------------------------------
    # (no on_message_begin: the URL and headers are reset once taken, one callback fewer)
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        exchange = Exchange(
            self,
            parser.get_method(),
            self._url,
            self._headers,
            keep_alive=parser.should_keep_alive(),
        )
        self._url = b""
        self._headers = []
        self.head_since = None
        self._parsing = exchange
        if self.active is None:
            self.active = exchange
            exchange.begin()
        else:
            self._pending.append(exchange)

    def on_body(self, body: bytes) -> None:
        if self._parsing is not None:
            self._parsing.request_body(body)

    def on_message_complete(self) -> None:
        if self._parsing is not None:
            self._parsing.request_complete()

    # -- for exchanges -------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self._closed and self.transport is not None:
            self.transport.write(data)

    def hold(self, exchange: Exchange) -> None:
        """``exchange`` holds what it sends until the read being parsed is done."""
        previous, self._holding = self._holding, exchange
        if previous is not None and previous is not exchange:
            previous.release_held()

    def pause_reading(self) -> None:
        """Flow control: stop reading the client until as many ``resume_reading``."""
        self._paused += 1
        self._set_reading()

    def resume_reading(self) -> None:
        if self._paused == 0:
            return
        self._paused -= 1
        self._set_reading()

    def body_full(self, exchange: Exchange) -> None:
        """``exchange`` buffers as much of its request's body as it may, having nowhere to
        send it yet: read no more until it has (``body_sent``) or it ends."""
        self._body_full = exchange
        self._set_reading()

    def body_sent(self, exchange: Exchange) -> None:
        """``exchange`` has sent its buffered body on: read the rest."""
        if self._body_full is exchange:
            self._body_full = None
            self._set_reading()

    def _set_reading(self) -> None:
        """Pause or resume the transport as the flow-control and body pauses say."""
        paused = self._paused > 0 or self._body_full is not None
        if paused == self._reading_paused or self._closed or self.transport is None:
            return
        self._reading_paused = paused
        if paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def exchange_done(self, exchange: Exchange, *, keep_alive: bool) -> None:
        """``exchange`` has written its whole answer: close, or answer the next request."""
        if self.active is not exchange:
            return
        self.active = None
        self.waiting_since = time.monotonic()
        self._paused = 0  # its replica's flow control is over
        if self._body_full is exchange:
            self._body_full = None  # what is left of its body is read and dropped
        self._set_reading()
        if not keep_alive:
            self.close()
            return
        if self._pending:
            self.active = self._pending.pop(0)
            self.active.begin()

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self._closed = True
            self.transport.abort()

    def _fail_parse(self, message: str) -> None:
        if self.active is None or not self.active.response_started:
            self.write(error_response(400, message, "invalid_request", keep_alive=False))
        if self.active is not None:
            self.active.client_lost()
        self.close()
