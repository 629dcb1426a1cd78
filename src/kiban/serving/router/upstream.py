"""Connections to replicas: one asyncio protocol per connection, kept alive in a pool.

A replica's address is ``host:port`` (TCP), or ``unix:/path`` for a replica on this machine
that listens on a Unix socket too (the local executor's): a request and its answer then cost
the kernel far less than over loopback TCP, a fifth of the router's CPU per request.

A connection carries one request at a time (no pipelining to replicas). Idle connections are
reused last-in first-out, so the busiest stay warm; one the replica closes while idle leaves
the pool at once (``connection_lost``). One idle longer than ``IDLE_EXPIRY_S`` is closed rather
than reused: a replica's server closes idle keep-alive connections on its own timer (uvicorn
after 5 s, gunicorn after 2 s), and a request written into a connection the replica is closing
at that moment fails after it was sent, which the router may not retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from kiban.serving.router.exchange import Exchange

MAX_IDLE_PER_REPLICA = 1024
IDLE_EXPIRY_S = 1.5
"""Idle connections older than this are not reused: below gunicorn's 2 s keep-alive default."""
UNIX_PREFIX = "unix:"
"""An address that starts so is the path of a Unix socket."""


class UpstreamConnection:
    """One keep-alive connection to a replica; hands what it reads to its current exchange.

    An ``asyncio.Protocol`` by its methods, not by inheritance (see ``ClientConnection``).
    """

    __slots__ = (
        "address",
        "closed",
        "exchange",
        "host_line",
        "idle_since",
        "paused",
        "pool",
        "transport",
    )

    def __init__(self, pool: UpstreamPool, address: str) -> None:
        self.pool = pool
        self.address = address
        host = "localhost" if address.startswith(UNIX_PREFIX) else address
        self.host_line = b"host: %b\r\n" % host.encode()
        """The ``Host`` header of every request sent here, made once."""
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self.paused = False
        self.idle_since = 0.0
        """When it was last given back to the pool, on the pool's clock."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is not None:
            exchange.upstream_data(data)
        else:  # a replica that talks out of turn cannot be trusted with the next request
            self.close()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        exchange = self.exchange
        self.exchange = None
        if exchange is not None:
            exchange.upstream_lost()

    def pause_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client.pause_reading()

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed and self.paused:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close without reuse (the exchange, if any, is detached first by the caller)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamPool:
    """Idle keep-alive connections per replica address."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        clock: Callable[[], float] | None = None,
        idle_expiry_s: float = IDLE_EXPIRY_S,
    ) -> None:
        self._loop = loop
        self._clock = clock or loop.time
        self._idle_expiry_s = idle_expiry_s
        self._idle: dict[str, list[UpstreamConnection]] = {}

    def take(self, address: str) -> UpstreamConnection | None:
        """A fresh idle connection to ``address``, or None (open one with ``open``)."""
        idle = self._idle.get(address)
        if not idle:
            return None
        oldest_fresh = self._clock() - self._idle_expiry_s
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if conn.idle_since >= oldest_fresh:
                return conn
            # given back in time order, so every connection under this one is older still
            stale = [conn, *idle]
            idle.clear()
            for old in stale:
                old.close()
            return None
        return None

    async def open(self, address: str) -> UpstreamConnection:
        """A new connection; raises OSError when the replica cannot be reached."""
        conn = UpstreamConnection(self, address)
        protocol = cast(asyncio.Protocol, conn)
        if address.startswith(UNIX_PREFIX):
            path = address[len(UNIX_PREFIX) :]
            await self._loop.create_unix_connection(lambda: protocol, path)
        else:
            host, _, port = address.rpartition(":")
            await self._loop.create_connection(lambda: protocol, host.strip("[]"), int(port))
        return conn

    def give_back(self, conn: UpstreamConnection) -> None:
        """Keep ``conn`` for the next request to its replica (or close it when too many)."""
        conn.exchange = None
        if conn.closed:
            return
        conn.idle_since = self._clock()
        idle = self._idle.setdefault(conn.address, [])
        if len(idle) >= MAX_IDLE_PER_REPLICA:
            conn.close()
        else:
            idle.append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.address)
        if idle and conn in idle:
            idle.remove(conn)

    def close_all(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
