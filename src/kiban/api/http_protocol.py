"""The API's HTTP/1.1 connections: uvicorn's httptools protocol with bounds it lacks.

uvicorn bounds neither a request's head (a 16 MiB header was read whole) nor how long a client
may take to send its request (a connection that sent half a request and stopped was held until
the client went away), and when it closes a connection whose request body it did not read, the
client may see a reset instead of the answer. Here:

- a head (request line and headers) over ``max_head_bytes`` is answered 431, and the
  connection closed;
- a request's head must be complete ``head_timeout_s`` after the connection opened or the
  request's first byte came, and its body ``body_timeout_s`` after its head: else 408 (or, when
  not a byte of a request came, nothing) and the connection is closed. Between requests,
  uvicorn's keep-alive timeout closes an idle connection;
- a connection closed with a request unread (refused before its body was read) is closed
  gently, as nginx's lingering close: the answer is sent, our side is shut for writing, and
  what the client still sends is read and dropped until it closes, for ``linger_s`` and
  ``linger_bytes`` at most;
- ``GET``/``HEAD /healthz`` without a body is answered here, as the request is parsed, with
  what admission would answer: no task is made for it, so under a burst it does not wait in
  line behind every other request's task on the event loop (only behind the reads and writes
  of the loop's current round);
- a new connection's first request is begun (parsed, its task made) only when the loop's
  turn has room (``starts_per_turn``, ``kiban.api.turns``); otherwise its bytes are held and
  its reading paused until a later turn, so that a burst of connections is spread over many
  short turns and a ``/healthz`` (never held) waits for one short turn, not for a burst's.
"""

from __future__ import annotations

import asyncio
import json
from enum import Enum
from typing import Any
from weakref import WeakKeyDictionary

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState

from kiban.api.admission import HEALTH_PATH, HEALTHY_BODY, HEALTHY_HEADERS
from kiban.api.turns import TurnPacer

MAX_HEAD_BYTES = 64 * 1024
"""As the serving router (and nginx's default of four 8 KiB buffers, with room)."""
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
"""Ample for the largest body the API reads (2 MiB) on a slow link."""
LINGER_S = 2.0
LINGER_BYTES = 1 << 20
STARTS_PER_TURN = 16
"""New connections' requests begun per turn of the loop: each costs the loop about 0.3-0.5 ms
(parsing, admission, the answer), so a turn stays near 5-8 ms of CPU under a burst."""
HEALTH_PREFIXES = (b"GET /healthz ", b"HEAD /healthz ", b"GET /healthz?", b"HEAD /healthz?")
"""How a health check's first bytes look: never held (see ``GuardedHttpProtocol.data_received``)."""

_PACERS: WeakKeyDictionary[ServerState, TurnPacer] = WeakKeyDictionary()
"""One pacer per server (all of its connections share the loop's turns)."""


class Phase(Enum):
    """Where a connection is in its current request."""

    IDLE = "idle"  # between requests (or none yet)
    HEAD = "head"  # its request line and headers are arriving
    BODY = "body"  # its body is arriving
    READ = "read"  # all of it arrived; being answered


def _error(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": {"status": status, "message": message, "problems": []}}).encode()
    return b"".join(
        [
            f"HTTP/1.1 {status} {reason}\r\n".encode(),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounded (see the module's docstring); the bounds are class
    attributes, so that a test can make a subclass with shorter ones."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout_s = HEAD_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S
    linger_s = LINGER_S
    linger_bytes = LINGER_BYTES
    starts_per_turn = STARTS_PER_TURN

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase = Phase.IDLE
        self._fresh = True  # no byte read yet: its first request waits for room in a turn
        self._held = b""
        self._head_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._dropped = 0
        self._raw: asyncio.Transport | None = None
        self._health: RequestResponseCycle | None = None  # answered once its request is read

    # -- the connection --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_GentleTransport(transport, self))
        self._expect(self.head_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._expect(None)
        self._held = b""  # still in the pacer's line: it is passed over
        self._lingering = False
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._dropped += len(data)
            if self._dropped > self.linger_bytes:
                self._close_now()
            return
        if self._held:
            self._held += data  # read before the pause took effect
            return
        if self._fresh:
            self._fresh = False
            if not data.startswith(HEALTH_PREFIXES) and not self._pacer().admit(self._begin):
                self._held = data
                if self._raw is not None:
                    self._raw.pause_reading()
                return
        self._receive(data)

    def _pacer(self) -> TurnPacer:
        pacer = _PACERS.get(self.server_state)
        if pacer is None or pacer.loop is not self.loop:
            pacer = _PACERS[self.server_state] = TurnPacer(self.loop, self.starts_per_turn)
        return pacer

    def _begin(self) -> bool:
        """The turn has room: read what was held, and go on reading."""
        data, self._held = self._held, b""
        if self._raw is None or self._raw.is_closing():
            return False
        self._raw.resume_reading()
        self._receive(data)
        return True

    def _receive(self, data: bytes) -> None:
        if self.phase in (Phase.IDLE, Phase.HEAD):
            self._head_bytes += len(data)
        super().data_received(data)
        if self.phase in (Phase.IDLE, Phase.HEAD) and self._head_bytes > self.max_head_bytes:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"the request's head is larger than {self.max_head_bytes // 1024} KiB",
            )
        elif self.phase is Phase.HEAD and self._deadline is None:
            self._expect(self.head_timeout_s)  # a request after a kept-alive one

    # -- the parser's callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.phase = Phase.HEAD
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self.phase = Phase.BODY
        self._head_bytes = 0
        self._expect(self.body_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.phase = Phase.READ
        self._expect(None)
        super().on_message_complete()
        health, self._health = self._health, None
        if health is not None and health is self.cycle:
            self._answer_health(health)

    def on_response_complete(self) -> None:
        if self.phase is Phase.READ:
            self.phase = Phase.IDLE
        super().on_response_complete()

    # -- /healthz ---------------------------------------------------------------------------------
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if not _is_health_check(cycle.scope):
            super()._start_asgi_task(cycle, app)
        elif cycle.more_body:
            self._health = cycle  # its head is read: answered when the parser ends it
        else:
            self._answer_health(cycle)  # a pipelined one, read already

    def _answer_health(self, cycle: RequestResponseCycle) -> None:
        """Answer ``/healthz`` as ``kiban.api.admission`` does, as uvicorn's cycle would send
        it (its default headers, ``connection: close`` unless kept alive), then go on as after
        any answer (the next pipelined request, or the keep-alive timeout)."""
        head = [STATUS_LINE[200]]
        for name, value in (*cycle.default_headers, *HEALTHY_HEADERS):
            head += [name, b": ", value, b"\r\n"]
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if cycle.scope["method"] != "HEAD":
            head.append(HEALTHY_BODY)
        cycle.response_started = cycle.response_complete = True
        cycle.on_response = lambda: None
        self.transport.write(b"".join(head))
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()

    # -- deadlines -------------------------------------------------------------------------------
    def _expect(self, within_s: float | None) -> None:
        """Set the deadline of what is awaited now (None: nothing is awaited of the client)."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if within_s is not None:
            self._deadline = self.loop.call_later(within_s, self._late)

    def _late(self) -> None:
        self._deadline = None
        if self._held:
            self._refuse(503, "Service Unavailable", "the server is too busy to read requests")
        elif self.phase is Phase.HEAD or (self.phase is Phase.IDLE and self._head_bytes):
            self._refuse(
                408, "Request Timeout", f"the request was not sent within {self.head_timeout_s:g} s"
            )
        elif self.phase is Phase.BODY:
            if self.cycle is not None and self.cycle.response_started:
                self._close_now()
            else:
                self._refuse(
                    408,
                    "Request Timeout",
                    f"the request's body was not sent within {self.body_timeout_s:g} s",
                )
        elif self.phase is Phase.IDLE:
            self._close_now()  # connected, never sent a byte

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` and close, the request left unread."""
        self._expect(None)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app, if it runs, answers nobody
            self.cycle.message_event.set()
        if self._raw is not None and not self._raw.is_closing():
            self._raw.write(_error(status, reason, message))
        self.transport.close()

    # -- the gentle close ------------------------------------------------------------------------
    def unread(self) -> bool:
        """Whether the client may still be sending the current request."""
        return self.phase in (Phase.HEAD, Phase.BODY)

    def linger(self) -> None:
        """Our answer is out: shut our side, drop what the client still sends, for a while."""
        self._lingering = True
        self._expect(None)
        assert self._raw is not None
        self._raw.write_eof()
        self._raw.resume_reading()
        self.loop.call_later(self.linger_s, self._close_now)

    def _close_now(self) -> None:
        if self._raw is not None and not self._raw.is_closing():
            self._raw.close()

    def eof_received(self) -> None:
        if self._lingering:
            self._close_now()


def _is_health_check(scope: Any) -> bool:
    """``GET`` or ``HEAD /healthz`` with no body (one with a body goes the usual way)."""
    if scope["path"] != HEALTH_PATH or scope["method"] not in ("GET", "HEAD"):
        return False
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (
            name == b"content-length" and value.strip() not in (b"", b"0")
        ):
            return False
    return True


class _GentleTransport(asyncio.Transport):
    """The connection's transport as uvicorn sees it: closing it while the client is still
    sending a request lingers (``GuardedHttpProtocol.linger``) rather than resets."""

    def __init__(self, raw: asyncio.Transport, protocol: GuardedHttpProtocol) -> None:
        super().__init__()
        self._raw = raw
        self._protocol = protocol

    def close(self) -> None:
        raw = self._raw
        if raw.is_closing() or self._protocol._lingering:
            return
        if self._protocol.unread() and raw.can_write_eof():
            self._protocol.linger()
        else:
            raw.close()

    def is_closing(self) -> bool:
        return self._raw.is_closing() or self._protocol._lingering

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._raw.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._raw.writelines(list_of_data)

    def write_eof(self) -> None:
        self._raw.write_eof()

    def can_write_eof(self) -> bool:
        return self._raw.can_write_eof()

    def abort(self) -> None:
        self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        if not self._protocol._lingering:
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._raw.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._raw.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)
