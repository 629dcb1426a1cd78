"""The serving router: one port for every service, canary splits, queueing, pass-through streams.

The control plane keeps a ``RoutingTable`` up to date; ``RouterServer`` serves requests from
it; ``TrafficMetrics`` counts what it served, for the autoscaler and ``kiban describe``.
"""

from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import Endpoint, Route, RoutingTable, ServiceKey
from kiban.serving.router.traffic import (
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
