"""The serving router: one port for every service, canary splits, queueing, pass-through streams.

The control plane keeps a ``RoutingTable`` up to date; ``RouterServer`` serves requests from
it; ``TrafficMetrics`` counts what it served, for the autoscaler and ``kiban describe``.
The modules on each request's path run compiled when a build of them exists (``native``).
"""

from kiban.serving.router import native

native.activate(__path__)

from kiban.serving.router.server import RouterServer  # noqa: E402  (after activate)
from kiban.serving.router.table import Endpoint, Route, RoutingTable, ServiceKey  # noqa: E402
from kiban.serving.router.traffic import (  # noqa: E402
    ConcurrencySample,
    RevisionSnapshot,
    ServiceSnapshot,
    TrafficMetrics,
)

__all__ = [
    "ConcurrencySample",
    "Endpoint",
    "RevisionSnapshot",
    "Route",
    "RouterServer",
    "RoutingTable",
    "ServiceKey",
    "ServiceSnapshot",
    "TrafficMetrics",
]
