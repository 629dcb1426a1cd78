"""The dispatcher's caches of what every request would otherwise decode or format again."""

from __future__ import annotations

import asyncio

import pytest

from kiban.serving.router import dispatcher as dispatching
from kiban.serving.router.balancer import Balancer
from kiban.serving.router.dispatcher import Dispatcher
from kiban.serving.router.table import Endpoint, Route, RoutingTable
from kiban.serving.router.traffic import TrafficMetrics


def _dispatcher(max_known_names: int = dispatching.MAX_KNOWN_NAMES) -> Dispatcher:
    loop = asyncio.new_event_loop()
    loop.close()  # nothing here runs on it
    return Dispatcher(
        loop,
        RoutingTable(),
        TrafficMetrics(),
        Balancer(),
        lambda t, k: False,
        max_known_names=max_known_names,
    )


def test_names_are_percent_decoded_once_and_the_cache_is_bounded() -> None:
    dispatcher = _dispatcher(max_known_names=3)
    key = dispatcher.service_key(b"my%20team", b"svc")
    assert key == ("my team", "svc")
    assert dispatcher._keys == {(b"my%20team", b"svc"): key}  # kept: not decoded again
    assert dispatcher.service_key(b"my%20team", b"svc") == key
    assert len(dispatcher._keys) == 1
    for n in range(10):
        assert dispatcher.service_key(b"t", b"s%d" % n) == ("t", f"s{n}")
    assert len(dispatcher._keys) <= 3


def test_the_revision_line_is_a_header_line() -> None:
    dispatcher = _dispatcher()
    assert dispatcher.revision_line("v1") == b"\r\nx-kiban-revision: v1\r\n"
    assert dispatcher.revision_line("v1") is dispatcher.revision_line("v1")


def _route(*ready: str, traffic: dict[str, int] | None = None, limit: int = 0) -> Route:
    endpoints = tuple(Endpoint("v1", address, True) for address in ready)
    return Route("t", "s", traffic or {"v1": 100}, endpoints, max_concurrency_per_endpoint=limit)


def test_a_plan_is_kept_until_the_routing_table_changes() -> None:
    dispatcher = _dispatcher()
    assert dispatcher.plan(b"t", b"s") is None
    first = _route("10.0.0.1:80")
    dispatcher.table.set(first)
    plan = dispatcher.plan(b"t", b"s")
    assert plan is not None and plan.route is first and plan.key == ("t", "s")
    assert dispatcher.plan(b"t", b"s") is plan
    assert plan.only is not None and plan.only.revision == "v1"
    assert plan.only.only == Endpoint("v1", "10.0.0.1:80", True)
    assert plan.only.line == dispatcher.revision_line("v1")
    assert plan.only.counter is dispatcher.metrics.counter(("t", "s"), "v1")

    second = _route("10.0.0.1:80", "10.0.0.2:80")  # two replicas: the balancer chooses
    dispatcher.table.set(second)
    replanned = dispatcher.plan(b"t", b"s")
    assert replanned is not None and replanned.route is second
    assert replanned.only is not None and replanned.only.only is None

    dispatcher.table.remove("t", "s")
    assert dispatcher.plan(b"t", b"s") is None


def test_a_plan_leaves_choices_to_the_balancer_when_there_are_any() -> None:
    dispatcher = _dispatcher()
    dispatcher.table.set(_route("10.0.0.1:80", limit=4))  # the limit must be checked
    limited = dispatcher.plan(b"t", b"s")
    assert limited is not None and limited.only is not None and limited.only.only is None
    canary = Route(
        "t",
        "s",
        {"v1": 90, "v2": 10},
        (Endpoint("v1", "10.0.0.1:80", True), Endpoint("v2", "10.0.0.2:80", False)),
    )
    dispatcher.table.set(canary)
    split = dispatcher.plan(b"t", b"s")
    assert split is not None and split.only is None  # a revision is drawn per request
    assert split.revisions["v1"].only == Endpoint("v1", "10.0.0.1:80", True)
    assert split.revisions["v2"].only is None  # its one replica is not ready


def test_each_revision_has_its_own_cap_per_replica() -> None:
    """A canary whose model server batches less is capped lower than the stable revision."""
    dispatcher = _dispatcher()
    endpoints = (Endpoint("v1", "10.0.0.1:80", True), Endpoint("v2", "10.0.0.2:80", True))
    route = Route(
        "t",
        "s",
        {"v1": 50, "v2": 50},
        endpoints,
        max_concurrency_per_endpoint=0,
        concurrency_by_revision={"v2": 2},
    )
    assert dict(route.limits) == {"v1": 0, "v2": 2}
    dispatcher.table.set(route)
    plan = dispatcher.plan(b"t", b"s")
    assert plan is not None
    assert plan.revisions["v1"].only == endpoints[0]  # no cap: no balancing to do
    assert plan.revisions["v2"].only is None  # a cap to check
    balancer = dispatcher.balancer
    for _ in range(2):
        chosen = balancer.endpoint(route, "v2")
        assert chosen == endpoints[1]
        balancer.acquire(chosen)
    assert balancer.endpoint(route, "v2") is None  # full: the next one waits
    for _ in range(5):
        balancer.acquire(endpoints[0])
    assert balancer.endpoint(route, "v1") == endpoints[0]  # the stable one has no cap
    with pytest.raises(ValueError, match="concurrency caps"):
        Route("t", "s", {"v1": 100}, endpoints[:1], concurrency_by_revision={"v1": -1})
