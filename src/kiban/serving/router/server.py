"""``RouterServer``: the router's event loop in a background thread, listening on one port.

uvloop drives the loop when it is importable (it is installed with uvicorn[standard]); the
plain asyncio loop works too, only slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Callable
from typing import cast
from urllib.parse import quote

from kiban.serving.router.balancer import Balancer
from kiban.serving.router.dispatcher import Authorize, Dispatcher
from kiban.serving.router.proxy import ClientConnection
from kiban.serving.router.sweeper import Sweeper
from kiban.serving.router.table import RoutingTable
from kiban.serving.router.traffic import TrafficMetrics


def _deny(tenant: str, token: str) -> bool:
    return False


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class RouterServer:
    """The serving router: requests to ``/s/{tenant}/{service}/...`` go to the service's replicas.

    ``authorize(tenant, token)`` is called on the router's loop for every request to a route
    that is not public, so it must be quick (the control plane's caches tokens); without it
    only public routes can be called.
    """

    def __init__(
        self,
        table: RoutingTable,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        authorize: Authorize = _deny,
        metrics: TrafficMetrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.table = table
        self.host = host
        self.metrics = metrics or TrafficMetrics()
        self._requested_port = port
        self._authorize = authorize
        self._rng = rng
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._dispatcher: Dispatcher | None = None
        self._listener: Callable[[], None] | None = None
        self._sweeper: Sweeper | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the router is not started")
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url_for(self, tenant: str, service: str) -> str:
        """The service's URL; ``/openai/v1/...`` and ``/v2/...`` below it reach its replicas."""
        return f"{self.url}/s/{quote(tenant, safe='')}/{quote(service, safe='')}"

    def start(self) -> None:
        """Start listening; returns once the port is open (errors binding it are raised here)."""
        if self._thread is not None:
            raise RuntimeError("the router is already started")
        loop = new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen(loop))
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="kiban-router", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]

    async def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        balancer = Balancer(self._rng)
        dispatcher = Dispatcher(loop, self.table, self.metrics, balancer, self._authorize)
        self._dispatcher = dispatcher
        self._server = await loop.create_server(
            lambda: cast(asyncio.Protocol, ClientConnection(dispatcher)),
            self.host,
            self._requested_port,
            reuse_address=True,
            backlog=2048,
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._sweeper = Sweeper(loop, dispatcher)  # half-sent requests and idle connections
        self._sweeper.start()

        def changed() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(dispatcher.table_changed)

        self._listener = changed
        self.table.add_listener(changed)

    def stop(self) -> None:
        """Close the port and every connection, and end the loop's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._listener is not None:
            self.table.remove_listener(self._listener)
        done = threading.Event()

        def shut() -> None:
            if self._sweeper is not None:
                self._sweeper.stop()
            if self._server is not None:
                self._server.close()
            if self._dispatcher is not None:
                for conn in list(self._dispatcher.connections):
                    conn.abort()
                self._dispatcher.pool.close_all()
            loop.call_later(0.05, loop.stop)
            done.set()

        loop.call_soon_threadsafe(shut)
        done.wait(5)
        thread.join(5)
        self._thread = None
        self._loop = None

    def __enter__(self) -> RouterServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
