"""The router's connections that send half a request and stop, or nothing at all, are closed.

A request whose head has not come whole ``head_timeout_s`` after its first byte is answered
408 and its connection closed; a connection with no request in flight for ``idle_timeout_s``
(a client that connected and never sent, or kept its connection after its last answer) is
closed. A request being answered has its route's own deadlines (``exchange``). One timer
looks at every connection once a second, on the router's loop.
"""

from __future__ import annotations

import asyncio
import time

from kiban.serving.router.dispatcher import Dispatcher
from kiban.serving.router.messages import error_response

HEAD_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 60.0
EVERY_S = 1.0


class Sweeper:
    """Closes the dispatcher's stalled and idle client connections (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, dispatcher: Dispatcher) -> None:
        self.loop = loop
        self.dispatcher = dispatcher
        self.head_timeout_s = HEAD_TIMEOUT_S
        self.idle_timeout_s = IDLE_TIMEOUT_S
        self.every_s = EVERY_S
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = self.loop.call_later(self.every_s, self._sweep)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.dispatcher.connections):
            if conn.active is not None:
                continue
            if conn.head_since is not None:
                if now - conn.head_since > self.head_timeout_s:
                    message = f"the request was not sent within {self.head_timeout_s:g} s"
                    conn.write(error_response(408, message, "timeout", keep_alive=False))
                    conn.close()
            elif now - conn.waiting_since > self.idle_timeout_s:
                conn.close()
        self._timer = self.loop.call_later(self.every_s, self._sweep)
