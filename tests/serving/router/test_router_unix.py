"""Replicas on the router's machine reached over a Unix socket (``unix:/path`` addresses)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from router_support import FakeReplica, ready, route

from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import RoutingTable


@pytest.fixture
def unix_replica(tmp_path: Path) -> Iterator[FakeReplica]:
    replica = FakeReplica("unix", unix_path=str(tmp_path / "replica.sock"))
    yield replica
    replica.stop()


def test_requests_reach_a_replica_over_its_unix_socket_on_one_connection(
    router: RouterServer, table: RoutingTable, unix_replica: FakeReplica
) -> None:
    table.set(route(ready(unix_replica.unix_address)))
    url = router.url_for("team", "svc")
    with httpx.Client() as client:
        for n in range(3):
            answer = client.post(f"{url}/v2/echo?n={n}", content=b"body")
            assert answer.status_code == 200
            assert answer.headers["x-kiban-revision"] == "v1"
            seen = answer.json()
            assert seen["replica"] == "unix"
            assert (seen["path"], seen["query"], seen["body"]) == ("/v2/echo", f"n={n}", "body")
            assert seen["headers"]["host"] == "localhost"  # not the socket's path
    assert unix_replica.requests == 3


def test_a_unix_socket_nobody_listens_on_is_retried_on_another_replica(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica], tmp_path: Path
) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as sock:  # the file stays, nothing listens
        sock.bind(str(stale))
    table.set(route(ready(f"unix:{stale}"), ready(replicas[0]), max_concurrency_per_endpoint=0))
    url = router.url_for("team", "svc")
    with httpx.Client() as client:
        for _ in range(4):
            answer = client.get(f"{url}/v2/echo")
            assert answer.status_code == 200
            assert answer.json()["replica"] == "r0"


def test_only_a_missing_unix_socket_is_502(
    router: RouterServer, table: RoutingTable, tmp_path: Path
) -> None:
    table.set(route(ready(f"unix:{tmp_path / 'missing.sock'}")))
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo")
    assert answer.status_code == 502
    assert answer.json()["error"]["type"] == "bad_gateway"
