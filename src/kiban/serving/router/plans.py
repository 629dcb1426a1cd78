"""What the router works out once per service and routing-table version, not per request.

A request names its service by two URL segments. Decoding them, finding the route, drawing
a revision when only one takes traffic, finding that revision's counters and header line and,
when it has one ready replica and no concurrency limit, that replica: each is a lookup and a
call, and together they were a fifth of the router's Python work for a request. A
``ServicePlan`` holds their results until the routing table changes (its ``version``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiban.serving.router.table import Endpoint, Route, ServiceKey
from kiban.serving.router.traffic import RevisionCounter, TrafficMetrics


@dataclass(frozen=True, slots=True)
class RevisionPlan:
    """One revision of a service as the router's hot path needs it."""

    revision: str
    counter: RevisionCounter
    line: bytes
    """The ``x-kiban-revision`` header line (see ``Dispatcher.revision_line``)."""
    only: Endpoint | None
    """Its one ready replica when that is the only choice (one ready, no concurrency limit):
    no balancing to do."""


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """A service's route and its revisions, valid for one version of the routing table."""

    key: ServiceKey
    route: Route
    version: int
    revisions: dict[str, RevisionPlan]
    only: RevisionPlan | None
    """The route's revision when it has just one: no draw to make."""


def make_plan(
    key: ServiceKey,
    route: Route,
    version: int,
    metrics: TrafficMetrics,
    line_of: dict[str, bytes],
) -> ServicePlan:
    """The plan of ``route`` (``line_of``: each revision's header line, made beforehand)."""
    revisions: dict[str, RevisionPlan] = {}
    for revision in route.traffic:
        ready = route.by_revision.get(revision, ())
        only = ready[0] if len(ready) == 1 and not route.limits[revision] else None
        revisions[revision] = RevisionPlan(
            revision, metrics.counter(key, revision), line_of[revision], only
        )
    only_revision = next(iter(revisions.values())) if len(revisions) == 1 else None
    return ServicePlan(key, route, version, revisions, only_revision)
