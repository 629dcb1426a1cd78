"""Choosing a replica: the canary split across revisions, then least outstanding requests.

The revision is drawn by the route's traffic percents (a seedable RNG, so tests can count
proportions); a request keeps its revision while it waits, so a revision scaled to zero gets
its own share of requests and is started for them, as Knative's activator does. Within the
revision the ready endpoint with the fewest requests in flight wins; ties go round-robin.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kiban.serving.router.table import Endpoint, Route


class Balancer:
    """Requests in flight per replica address, and the choices made from them.

    Used from the router's event loop only: no locks.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self.outstanding: dict[str, int] = {}
        self._turn: dict[tuple[str, str, str], int] = {}

    def revision(self, route: Route) -> str:
        """Draw a revision by the route's traffic percents."""
        traffic = route.traffic
        if len(traffic) == 1:
            return next(iter(traffic))
        point = self._rng.random() * 100.0
        last = ""
        for revision, percent in traffic.items():
            if percent <= 0:
                continue
            last = revision
            if point < percent:
                return revision
            point -= percent
        return last

    def endpoint(self, route: Route, revision: str, exclude: Iterable[str] = ()) -> Endpoint | None:
        """The ready endpoint of ``revision`` with the fewest requests in flight, or None.

        None when the revision has no ready endpoint, or every one is at the revision's cap
        (``Route.limits``), or all are in ``exclude`` (failed to connect).
        """
        candidates = route.by_revision.get(revision, ())
        count = len(candidates)
        if count == 0:
            return None
        limit = route.limits.get(revision, route.max_concurrency_per_endpoint)
        outstanding = self.outstanding
        if count == 1 and not exclude:
            only = candidates[0]
            if limit and outstanding.get(only.address, 0) >= limit:
                return None
            return only
        turn_key = (route.tenant, route.service, revision)
        turn = self._turn.get(turn_key, 0)
        self._turn[turn_key] = turn + 1
        excluded = set(exclude)
        best: Endpoint | None = None
        best_load = 0
        for i in range(count):
            candidate = candidates[(turn + i) % count]
            if candidate.address in excluded:
                continue
            load = outstanding.get(candidate.address, 0)
            if limit and load >= limit:
                continue
            if best is None or load < best_load:
                best, best_load = candidate, load
        return best

    def acquire(self, endpoint: Endpoint) -> None:
        address = endpoint.address
        self.outstanding[address] = self.outstanding.get(address, 0) + 1

    def release(self, endpoint: Endpoint) -> None:
        address = endpoint.address
        left = self.outstanding.get(address, 0) - 1
        if left > 0:
            self.outstanding[address] = left
        else:
            self.outstanding.pop(address, None)
