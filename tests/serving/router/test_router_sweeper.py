"""The router closes connections that send half a request and stop (408), and connections
with nothing in flight for a while; one that sends whole requests is served as before."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from router_support import raw_connection

from kiban.serving.router import sweeper
from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import RoutingTable


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> Iterator[RouterServer]:
    monkeypatch.setattr(sweeper, "HEAD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(sweeper, "IDLE_TIMEOUT_S", 1.5)
    monkeypatch.setattr(sweeper, "EVERY_S", 0.1)
    server = RouterServer(RoutingTable())
    server.start()
    yield server
    server.stop()


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(
    "partial", [b"GET /s/team/svc/v2 HTT", b"POST /s/team/svc/v2 HTTP/1.1\r\nHost: r\r\nX-A: b"]
)
def test_a_request_that_stops_half_way_is_408_and_closed(
    router: RouterServer, partial: bytes
) -> None:
    with raw_connection(router.port) as sock:
        sock.sendall(partial)
        started = time.monotonic()
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert time.monotonic() - started < 5


def test_a_connection_with_nothing_in_flight_is_closed_after_a_while(router: RouterServer) -> None:
    with raw_connection(router.port) as sock:
        started = time.monotonic()
        assert read_to_end(sock) == b""
        assert 1.0 < time.monotonic() - started < 6


def test_whole_requests_on_a_kept_connection_are_answered(router: RouterServer) -> None:
    with raw_connection(router.port) as sock:
        for _ in range(3):
            sock.sendall(b"GET /s/team/none/v2/models HTTP/1.1\r\nHost: r\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 404 ")  # no such service: answered, kept
            time.sleep(0.6)  # longer than a head may take, shorter than idle: not cut
