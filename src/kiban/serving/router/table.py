"""The routing table: which replicas serve each service, swapped whole by the control plane.

Routes are immutable values. The control plane replaces a service's route from its own thread;
the router reads the current mapping without a lock (a dict replaced whole is read atomically)
and is told of every change, so that requests waiting for a ready replica are woken at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

ServiceKey = tuple[str, str]
"""(tenant, service)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One replica of a revision: an HTTP model server at ``host:port``, or at ``unix:/path``
    (a Unix socket, for a replica on the router's machine)."""

    revision: str
    address: str
    ready: bool


@dataclass(frozen=True, slots=True)
class Route:
    """How requests to one service are served: the traffic split, the replicas, the limits."""

    tenant: str
    service: str
    traffic: Mapping[str, int]
    """Revision -> percent of requests; the percents sum to 100."""
    endpoints: tuple[Endpoint, ...]
    timeout_s: float = 600.0
    """Per request, from arrival to the end of the answer: long generations need minutes."""
    public: bool = False
    """A public route needs no bearer token."""
    max_concurrency_per_endpoint: int = 0
    """Requests in flight per replica at most; 0 is unlimited."""
    concurrency_by_revision: Mapping[str, int] = field(default_factory=dict)
    """The cap of a revision's replicas where it is not ``max_concurrency_per_endpoint`` (a
    canary whose model server batches differently)."""
    queue_limit: int = 1000
    """Requests waiting for a replica at most; the next one is answered 503."""
    activation_timeout_s: float = 300.0
    """How long a request waits for a replica (scale from zero included) before a 503."""
    by_revision: Mapping[str, tuple[Endpoint, ...]] = field(init=False, repr=False, compare=False)
    """The ready endpoints of each revision, computed once, for the router's hot path."""
    limits: Mapping[str, int] = field(init=False, repr=False, compare=False)
    """Each revision's cap per replica (0: none), computed once, for the router's hot path."""

    def __post_init__(self) -> None:
        if any(p < 0 for p in self.traffic.values()) or sum(self.traffic.values()) != 100:
            raise ValueError(
                f"traffic of {self.tenant}/{self.service} must be percents summing to 100, "
                f"got {dict(self.traffic)}"
            )
        if self.timeout_s <= 0 or self.activation_timeout_s <= 0:
            raise ValueError("timeout_s and activation_timeout_s must be positive")
        caps = [self.max_concurrency_per_endpoint, *self.concurrency_by_revision.values()]
        if any(cap < 0 for cap in caps) or self.queue_limit < 0:
            raise ValueError("concurrency caps and queue_limit must be >= 0")
        object.__setattr__(self, "traffic", MappingProxyType(dict(self.traffic)))
        limits = {
            revision: self.concurrency_by_revision.get(revision, self.max_concurrency_per_endpoint)
            for revision in self.traffic
        }
        object.__setattr__(self, "limits", MappingProxyType(limits))
        ready: dict[str, tuple[Endpoint, ...]] = {}
        for revision in self.traffic:
            ready[revision] = tuple(e for e in self.endpoints if e.revision == revision and e.ready)
        object.__setattr__(self, "by_revision", MappingProxyType(ready))

    @property
    def key(self) -> ServiceKey:
        return (self.tenant, self.service)


class RoutingTable:
    """The routes of all services; written by the control plane, read by the router.

    Readers take no lock: writers build a new mapping and swap it in, then count the change
    in ``version`` (so a reader that sees a new version finds the new mapping). Listeners
    are called after each change, from the writer's thread.
    """

    def __init__(self) -> None:
        self._routes: Mapping[ServiceKey, Route] = MappingProxyType({})
        self.version = 0
        """Changes so far: what was worked out from the routes holds while this stays."""
        self._write = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def set(self, route: Route) -> None:
        """Add or replace the route of ``route.tenant``/``route.service``."""
        with self._write:
            routes = dict(self._routes)
            routes[route.key] = route
            self._routes = MappingProxyType(routes)
            self.version += 1
        self._notify()

    def remove(self, tenant: str, service: str) -> None:
        """Forget a service; requests to it are answered 404 from now on."""
        with self._write:
            if (tenant, service) not in self._routes:
                return
            routes = dict(self._routes)
            del routes[(tenant, service)]
            self._routes = MappingProxyType(routes)
            self.version += 1
        self._notify()

    def get(self, tenant: str, service: str) -> Route | None:
        return self._routes.get((tenant, service))

    def route(self, key: ServiceKey) -> Route | None:
        """``get`` by (tenant, service), as the router holds them."""
        return self._routes.get(key)

    def keys(self) -> list[ServiceKey]:
        return list(self._routes)

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change (from the writer's thread)."""
        with self._write:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._write:
            self._listeners = [f for f in self._listeners if f is not listener]

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()
