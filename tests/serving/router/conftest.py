"""Fixtures of the router tests: three small replicas, a routing table and a router in front."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from router_support import TOKEN, FakeReplica

from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import RoutingTable


@pytest.fixture
def replicas() -> Iterator[list[FakeReplica]]:
    made = [FakeReplica(f"r{i}") for i in range(3)]
    yield made
    for replica in made:
        replica.stop()


@pytest.fixture
def table() -> RoutingTable:
    return RoutingTable()


@pytest.fixture
def router(table: RoutingTable) -> Iterator[RouterServer]:
    server = RouterServer(table, authorize=lambda tenant, token: token == TOKEN)
    server.start()
    yield server
    server.stop()
