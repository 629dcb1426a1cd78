"""What every request of the router shares: the table, the balancer, the pool, the waiting queues.

Requests that find no ready replica with room (a service scaled to zero, or every replica at
its revision's cap, ``Route.limits``) wait here in a FIFO queue per service and revision. A
replica freed by a finished request, or a table change (a replica became ready), hands them
out in arrival order. The deadlines of requests (the route's timeout, the wait for a replica)
are kept here too, by one timer for all. Everything here runs on the router's event loop.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

from kiban.serving.router.balancer import Balancer
from kiban.serving.router.plans import ServicePlan, make_plan
from kiban.serving.router.table import RoutingTable, ServiceKey
from kiban.serving.router.traffic import TrafficMetrics
from kiban.serving.router.upstream import UpstreamPool

if TYPE_CHECKING:
    from kiban.serving.router.exchange import Exchange
    from kiban.serving.router.proxy import ClientConnection

Authorize = Callable[[str, str], bool]
"""``authorize(tenant, token)``: may this bearer token call the tenant's services?"""
MAX_KNOWN_NAMES = 4096
"""URL names decoded and kept (any client can make up names, so they are bounded)."""
DEADLINE_SLACK_S = 0.001
"""The deadline timer is set this much late: the loop's timers count whole milliseconds."""


class Dispatcher:
    """The router's shared state and its per-service queues of waiting requests."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        table: RoutingTable,
        metrics: TrafficMetrics,
        balancer: Balancer,
        authorize: Authorize,
        *,
        max_known_names: int = MAX_KNOWN_NAMES,
    ) -> None:
        self.loop = loop
        self.max_known_names = max_known_names
        """Bound of each cache keyed by names from URLs."""
        self.table = table
        self.metrics = metrics
        self.balancer = balancer
        self.authorize = authorize
        self.pool = UpstreamPool(loop)
        self.connections: set[ClientConnection] = set()
        """Open client connections; the current exchange of each is the one with deadlines."""
        self._waiting: dict[ServiceKey, dict[str, deque[Exchange]]] = {}
        self._counts: dict[ServiceKey, int] = {}
        self._check: asyncio.TimerHandle | None = None
        self.check_at = math.inf
        """When the deadline timer fires (infinity when unset)."""
        self._keys: dict[tuple[bytes, bytes], ServiceKey] = {}
        self._revision_lines: dict[str, bytes] = {}
        self._plans: dict[tuple[bytes, bytes], ServicePlan] = {}

    def service_key(self, tenant: bytes, service: bytes) -> ServiceKey:
        """(tenant, service) from the two names of a service URL, decoded once and kept."""
        raw = (tenant, service)
        key = self._keys.get(raw)
        if key is None:
            if len(self._keys) >= self.max_known_names:
                self._keys.clear()
            key = self._keys[raw] = (_name(tenant), _name(service))
        return key

    def plan(self, tenant: bytes, service: bytes) -> ServicePlan | None:
        """The plan of the service named by a URL's two segments, or None when it has no
        route; worked out again only when the routing table has changed since."""
        plan = self._plans.get((tenant, service))
        table = self.table
        if plan is not None and plan.version == table.version:
            return plan
        version = table.version  # read first: the routes read next are at least this new
        key = self.service_key(tenant, service)
        route = table.route(key)
        if route is None:
            self._plans.pop((tenant, service), None)
            return None
        if len(self._plans) >= self.max_known_names:
            self._plans.clear()
        lines = {revision: self.revision_line(revision) for revision in route.traffic}
        plan = self._plans[(tenant, service)] = make_plan(key, route, version, self.metrics, lines)
        return plan

    def revision_line(self, revision: str) -> bytes:
        """The ``x-kiban-revision`` header line of the revision's answers, made once; it comes
        after the CRLF that ends the status line, so it begins with that CRLF (the answer's
        first CRLF is replaced by it)."""
        line = self._revision_lines.get(revision)
        if line is None:
            if len(self._revision_lines) >= self.max_known_names:
                self._revision_lines.clear()
            line = self._revision_lines[revision] = b"\r\nx-kiban-revision: %b\r\n" % (
                revision.encode()
            )
        return line

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
        route = self.table.route(key)
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

    # -- deadlines -----------------------------------------------------------------------------
    def watch(self, deadline: float) -> None:
        """A begun exchange must be looked at by ``deadline`` (``time.perf_counter`` seconds).

        Why not a timer per request: setting and cancelling a loop timer costs about 2 µs, a
        tenth of the router's whole work for a request. One timer, set for the earliest
        deadline that may be due, looks at the current exchange of every connection when it
        fires; with the same timeout for all, it fires about once per timeout.
        """
        if deadline < self.check_at:
            self._set_check(deadline)

    def _set_check(self, at: float) -> None:
        if self._check is not None:
            self._check.cancel()
        self.check_at = at
        delay = max(at - time.perf_counter(), 0.0) + DEADLINE_SLACK_S
        self._check = self.loop.call_later(delay, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """End the exchanges past a deadline; set the timer for the earliest one left."""
        self._check = None
        self.check_at = math.inf
        now = time.perf_counter()
        earliest = math.inf
        for conn in list(self.connections):
            exchange = conn.active
            if exchange is not None:
                earliest = min(earliest, exchange.check_deadlines(now))
        if earliest < self.check_at:  # exchanges begun meanwhile have called watch()
            self._set_check(earliest)


def _name(part: bytes) -> str:
    """A tenant's or service's name from the URL (percent-decoded, as ``url_for`` quotes)."""
    text = part.decode("utf-8", "replace")
    return unquote(text) if "%" in text else text
