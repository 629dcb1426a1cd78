"""What every request of the router shares: the table, the balancer, the pool, the waiting queues.

Requests that find no ready replica with room (a service scaled to zero, or every replica at
its ``max_concurrency_per_endpoint``) wait here in a FIFO queue per service and revision. A
replica freed by a finished request, or a table change (a replica became ready), hands them
out in arrival order. Everything here runs on the router's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kiban.serving.router.balancer import Balancer
from kiban.serving.router.table import RoutingTable, ServiceKey
from kiban.serving.router.traffic import TrafficMetrics
from kiban.serving.router.upstream import UpstreamPool

if TYPE_CHECKING:
    from kiban.serving.router.proxy import Exchange

Authorize = Callable[[str, str], bool]
"""``authorize(tenant, token)``: may this bearer token call the tenant's services?"""


class Dispatcher:
    """The router's shared state and its per-service queues of waiting requests."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        table: RoutingTable,
        metrics: TrafficMetrics,
        balancer: Balancer,
        authorize: Authorize,
    ) -> None:
        self.loop = loop
        self.table = table
        self.metrics = metrics
        self.balancer = balancer
        self.authorize = authorize
        self.pool = UpstreamPool(loop)
        self._waiting: dict[ServiceKey, dict[str, deque[Exchange]]] = {}
        self._counts: dict[ServiceKey, int] = {}

    def waiting(self, key: ServiceKey) -> int:
        return self._counts.get(key, 0)

    def enqueue(self, exchange: Exchange, limit: int) -> bool:
        """Queue ``exchange`` for a replica of its revision; False when the queue is full."""
        key = exchange.key
        count = self._counts.get(key, 0)
        if count >= limit:
            return False
        self._counts[key] = count + 1
        revisions = self._waiting.setdefault(key, {})
        revisions.setdefault(exchange.revision, deque()).append(exchange)
        return True

    def withdraw(self, exchange: Exchange) -> None:
        """Take a waiting exchange out of its queue (it gave up or its client left)."""
        queue = self._waiting.get(exchange.key, {}).get(exchange.revision)
        if queue is not None and exchange in queue:
            queue.remove(exchange)
            self._counts[exchange.key] -= 1

    def released(self, key: ServiceKey, revision: str) -> None:
        """A replica of ``revision`` finished a request: the next waiter may take it."""
        if self._counts.get(key):
            self._hand_out(key, revision)

    def table_changed(self) -> None:
        """Routes changed: replicas may have become ready, services may be gone."""
        for key, revisions in list(self._waiting.items()):
            for revision in list(revisions):
                self._hand_out(key, revision)

    def _hand_out(self, key: ServiceKey, revision: str) -> None:
        queue = self._waiting.get(key, {}).get(revision)
        if not queue:
            return
        route = self.table.get(*key)
        while queue:
            if route is None or revision not in route.traffic:
                exchange = queue.popleft()
                self._counts[key] -= 1
                exchange.give_up(404, f"service {key[0]}/{key[1]} revision {revision} is gone")
                continue
            endpoint = self.balancer.endpoint(route, revision)
            if endpoint is None:
                return
            exchange = queue.popleft()
            self._counts[key] -= 1
            exchange.dispatched(route, endpoint)
