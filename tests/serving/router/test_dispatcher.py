"""The dispatcher's caches of what every request would otherwise decode or format again."""

from __future__ import annotations

import asyncio

import pytest

from kiban.serving.router import RoutingTable, TrafficMetrics
from kiban.serving.router import dispatcher as dispatching
from kiban.serving.router.balancer import Balancer
from kiban.serving.router.dispatcher import Dispatcher


def _dispatcher() -> Dispatcher:
    loop = asyncio.new_event_loop()
    loop.close()  # nothing here runs on it
    return Dispatcher(loop, RoutingTable(), TrafficMetrics(), Balancer(), lambda t, k: False)


def test_names_are_percent_decoded_once_and_the_cache_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dispatcher = _dispatcher()
    key = dispatcher.service_key(b"my%20team", b"svc")
    assert key == ("my team", "svc")
    assert dispatcher.service_key(b"my%20team", b"svc") is key
    monkeypatch.setattr(dispatching, "MAX_KNOWN_NAMES", 3)
    for n in range(10):
        assert dispatcher.service_key(b"t", b"s%d" % n) == ("t", f"s{n}")
    assert len(dispatcher._keys) <= 3


def test_the_revision_line_is_a_header_line() -> None:
    dispatcher = _dispatcher()
    assert dispatcher.revision_line("v1") == b"\r\nx-kiban-revision: v1\r\n"
    assert dispatcher.revision_line("v1") is dispatcher.revision_line("v1")
