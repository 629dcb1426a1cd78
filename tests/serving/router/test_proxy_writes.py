"""The proxy's protocol objects over fake transports: what each read and write carries."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kiban.serving.router.balancer import Balancer
from kiban.serving.router.dispatcher import Dispatcher
from kiban.serving.router.proxy import ClientConnection
from kiban.serving.router.table import Endpoint, Route, RoutingTable
from kiban.serving.router.traffic import TrafficMetrics
from kiban.serving.router.upstream import UpstreamConnection

ADDRESS = "127.0.0.1:9"
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


class FakeTransport:
    """Records writes; the proxy's protocols need nothing else of a transport here."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Proxy:
    """One client connection and one pooled replica connection, both over fake transports."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        table = RoutingTable()
        table.set(Route("team", "svc", {"v1": 100}, (Endpoint("v1", ADDRESS, True),), public=True))
        self.dispatcher = Dispatcher(
            loop, table, TrafficMetrics(), Balancer(), lambda tenant, token: False
        )
        self.upstream = UpstreamConnection(self.dispatcher.pool, ADDRESS)
        self.replica = FakeTransport()
        self.upstream.connection_made(self.replica)  # type: ignore[arg-type]
        self.dispatcher.pool.give_back(self.upstream)
        self.client = ClientConnection(self.dispatcher)
        self.client_side = FakeTransport()
        self.client.connection_made(self.client_side)  # type: ignore[arg-type]

    def answer(self, data: bytes = ANSWER) -> None:
        self.upstream.data_received(data)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    loop = asyncio.new_event_loop()
    yield Proxy(loop)
    loop.close()


def test_a_small_request_goes_to_the_replica_in_one_write(proxy: Proxy) -> None:
    proxy.client.data_received(
        b"POST /s/team/svc/v2/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nbody"
    )
    assert proxy.replica.writes == [
        b"POST /v2/infer HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-length: 4\r\n\r\nbody"
    ]
    proxy.answer()
    assert proxy.client_side.writes == [
        b"HTTP/1.1 200 OK\r\nx-kiban-revision: v1\r\ncontent-length: 2\r\n\r\nok"
    ]


def test_a_body_in_later_reads_is_forwarded_as_each_arrives(proxy: Proxy) -> None:
    proxy.client.data_received(
        b"POST /s/team/svc/v2/infer HTTP/1.1\r\ncontent-length: 8\r\n\r\nfour"
    )
    assert proxy.replica.writes == [
        b"POST /v2/infer HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-length: 8\r\n\r\nfour"
    ]
    proxy.client.data_received(b"more")
    assert proxy.replica.writes[1:] == [b"more"]


def test_a_chunked_body_in_one_read_goes_in_one_write(proxy: Proxy) -> None:
    proxy.client.data_received(
        b"POST /s/team/svc/v2/infer HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
        b"2\r\nab\r\n0\r\n\r\n"
    )
    assert proxy.replica.writes == [
        b"POST /v2/infer HTTP/1.1\r\nhost: 127.0.0.1:9\r\ntransfer-encoding: chunked\r\n\r\n"
        b"2\r\nab\r\n0\r\n\r\n"
    ]


def test_pipelined_requests_are_sent_one_at_a_time_each_whole(proxy: Proxy) -> None:
    first = b"POST /s/team/svc/v2/a HTTP/1.1\r\ncontent-length: 1\r\n\r\na"
    second = b"POST /s/team/svc/v2/b HTTP/1.1\r\ncontent-length: 1\r\n\r\nb"
    proxy.client.data_received(first + second)
    assert proxy.replica.writes == [
        b"POST /v2/a HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-length: 1\r\n\r\na"
    ]
    proxy.answer()
    assert proxy.replica.writes[1:] == [
        b"POST /v2/b HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-length: 1\r\n\r\nb"
    ]
    proxy.answer()
    assert len(proxy.client_side.writes) == 2


def test_a_request_the_router_answers_itself_does_not_hold_up_the_next(proxy: Proxy) -> None:
    proxy.client.data_received(
        b"GET /s/team/nothing/v2/a HTTP/1.1\r\n\r\n"
        b"POST /s/team/svc/v2/b HTTP/1.1\r\ncontent-length: 1\r\n\r\nb"
    )
    assert proxy.client_side.writes[0].startswith(b"HTTP/1.1 404 ")
    assert proxy.replica.writes == [
        b"POST /v2/b HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-length: 1\r\n\r\nb"
    ]
