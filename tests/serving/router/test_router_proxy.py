"""The router over real sockets: forwarding, access, errors, retries, timeouts, streaming."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from router_support import (
    TOKEN,
    FakeReplica,
    closed_port_address,
    in_background,
    raw_connection,
    ready,
    route,
)

from kiban.serving.router.messages import content_length as _content_length
from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import Endpoint, Route, RoutingTable
from kiban.testing import eventually


def test_forwards_below_the_prefix_with_the_query_and_names_the_revision(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0], "rev-a"), traffic={"rev-a": 100}))
    url = router.url_for("team", "svc")
    with httpx.Client() as client:
        for _ in range(3):  # one keep-alive connection to the router throughout
            answer = client.get(f"{url}/v2/echo?a=1&b=two", headers={"x-custom": "yes"})
            assert answer.status_code == 200
            assert answer.headers["x-kiban-revision"] == "rev-a"
            seen = answer.json()
            assert seen["path"] == "/v2/echo"
            assert seen["query"] == "a=1&b=two"
            assert seen["headers"]["x-custom"] == "yes"
            assert seen["headers"]["host"] == replicas[0].address
        answer = client.post(f"{url}/openai/v1/chat/completions", json={"x": 1})
        assert answer.json()["path"] == "/openai/v1/chat/completions"
        assert answer.json()["body"] == '{"x":1}'


def test_chunked_request_bodies_reach_the_replica_whole(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))

    def parts():  # type: ignore[no-untyped-def]
        yield b"hello "
        yield b"world"

    answer = httpx.post(f"{router.url_for('team', 'svc')}/v2/echo", content=parts())
    assert answer.json()["body"] == "hello world"
    assert answer.json()["headers"]["transfer-encoding"] == "chunked"


def test_head_answers_without_a_body_and_keeps_the_connection(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    with httpx.Client() as client:
        head = client.head(f"{router.url_for('team', 'svc')}/v2/echo")
        assert head.status_code == 200 and head.content == b""
        assert client.get(f"{router.url_for('team', 'svc')}/v2/echo").status_code == 200


def test_unknown_service_and_unforwarded_paths_are_404_json(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    missing = httpx.get(f"{router.url_for('team', 'nope')}/v2/echo")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found"
    assert "nope" in missing.json()["error"]["message"]
    for path in ("/admin", "/v2x", "/openai/v10/models", ""):
        elsewhere = httpx.get(f"{router.url_for('team', 'svc')}{path}")
        assert elsewhere.status_code == 404 and "error" in elsewhere.json()
    assert replicas[0].requests == 0
    for path in ("/v2", "/openai/v1", "/openai/v1/models"):
        assert httpx.get(f"{router.url_for('team', 'svc')}{path}").status_code == 200


def test_a_private_route_needs_the_tenants_bearer_token(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), public=False))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    with httpx.Client() as client:
        assert client.get(url).status_code == 401
        wrong = client.get(url, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "unauthorized"
        assert client.get(url, headers={"authorization": TOKEN}).status_code == 401
        good = client.get(url, headers={"authorization": f"Bearer {TOKEN}"})
    assert good.status_code == 200
    assert "authorization" not in good.json()["headers"]  # the kiban token stays here
    assert replicas[0].requests == 1


def test_a_public_route_needs_no_token(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), public=True))
    assert httpx.get(f"{router.url_for('team', 'svc')}/v2/echo").status_code == 200


def test_a_refused_connection_is_retried_on_another_replica(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    dead = closed_port_address()
    table.set(route(ready(dead), ready(replicas[0])))
    with httpx.Client() as client:
        answers = [client.get(f"{router.url_for('team', 'svc')}/v2/echo") for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 6
    assert replicas[0].requests == 6


def test_only_refused_replicas_is_502(router: RouterServer, table: RoutingTable) -> None:
    table.set(route(ready(closed_port_address()), ready(closed_port_address())))
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo")
    assert answer.status_code == 502 and answer.json()["error"]["type"] == "bad_gateway"


def test_a_replica_that_dies_with_the_request_gives_502_and_no_retry(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), ready(replicas[1])))
    started = time.perf_counter()
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/die", timeout=10)
    assert answer.status_code == 502
    assert answer.headers["x-kiban-revision"] == "v1"
    assert time.perf_counter() - started < 2
    assert replicas[0].requests + replicas[1].requests == 1  # sent once, not again


def test_a_replica_that_dies_mid_answer_cuts_the_client_off_quickly(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    started = time.perf_counter()
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(f"{router.url_for('team', 'svc')}/v2/die-mid", timeout=10)
    assert time.perf_counter() - started < 2
    # the router still serves
    assert httpx.get(f"{router.url_for('team', 'svc')}/v2/echo").status_code == 200


def test_the_routes_timeout_answers_504(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), timeout_s=0.3))
    started = time.perf_counter()
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo?ms=3000", timeout=10)
    elapsed = time.perf_counter() - started
    assert answer.status_code == 504 and answer.json()["error"]["type"] == "timeout"
    assert 0.25 < elapsed < 2


def test_a_shorter_timeout_begun_later_is_kept_on_time(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    """One timer serves every deadline: a later, earlier-due one must move it forward."""
    table.set(route(ready(replicas[0]), timeout_s=30))
    table.set(
        Route("team", "quick", {"v1": 100}, (ready(replicas[1]),), public=True, timeout_s=0.3)
    )
    slow, slow_out = in_background(
        lambda: httpx.get(f"{router.url_for('team', 'svc')}/v2/echo?ms=1500", timeout=10)
    )
    eventually(  # its 30 s is then the timer's
        lambda: replicas[0].in_flight == 1, what="the slow request at its replica", interval=0.005
    )
    started = time.perf_counter()
    answer = httpx.get(f"{router.url_for('team', 'quick')}/v2/echo?ms=3000", timeout=10)
    assert answer.status_code == 504
    assert 0.25 < time.perf_counter() - started < 2
    slow.join()
    assert slow_out[0].status_code == 200  # the other request's deadline is still ahead


def test_a_long_answer_within_the_timeout_is_not_cut(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), timeout_s=5))
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo?ms=700", timeout=10)
    assert answer.status_code == 200


def test_server_sent_events_pass_through_as_written(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    replica = replicas[0]
    table.set(route(ready(replica)))
    url = f"{router.url_for('team', 'svc')}/openai/v1/stream"
    # The replica holds its second event (and the stream's end) until released, 30 s at most:
    # a router that buffered the answer would pass on nothing within the 5 s read timeout.
    with httpx.stream("GET", url, timeout=5) as answer:
        assert answer.headers["x-kiban-revision"] == "v1"
        events = answer.iter_lines()
        assert next(events) == "data: event 0"
        replica.release.set()
        rest = [line for line in events if line]
    assert rest == ["data: event 1"]


def test_raw_keep_alive_and_connection_close(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    request = b"GET /s/team/svc/v2/echo HTTP/1.1\r\nhost: x\r\n\r\n"
    with raw_connection(router.port) as sock:
        sock.sendall(request + request)  # pipelined
        data = b""
        while data.count(b"x-kiban-revision") < 2:
            data += sock.recv(65536)
        sock.sendall(b"GET /s/team/svc/v2/echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert data.count(b"HTTP/1.1 200") == 2
    assert rest.startswith(b"HTTP/1.1 200") and b"x-kiban-revision: v1" in rest


def test_endpoints_are_recorded_in_the_services_snapshot(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    with httpx.Client() as client:
        for _ in range(5):
            client.get(f"{router.url_for('team', 'svc')}/v2/echo")
    snap = router.metrics.snapshot("team", "svc")
    assert snap.completed == 5 and snap.errors == 0 and snap.in_flight == 0
    assert snap.p50_ms is not None and snap.p99_ms is not None and 0 < snap.p50_ms <= snap.p99_ms
    assert snap.rps > 0
    assert [r.revision for r in snap.revisions] == ["v1"]


def test_a_route_can_be_replaced_while_serving() -> None:
    table = RoutingTable()
    a, b = FakeReplica("a"), FakeReplica("b")
    try:
        with RouterServer(table) as server, httpx.Client() as client:
            url = f"{server.url_for('team', 'svc')}/v2/echo"
            table.set(
                Route("team", "svc", {"v1": 100}, (Endpoint("v1", a.address, True),), public=True)
            )
            assert client.get(url).json()["replica"] == "a"
            table.set(
                Route("team", "svc", {"v2": 100}, (Endpoint("v2", b.address, True),), public=True)
            )
            answer = client.get(url)
            assert answer.json()["replica"] == "b" and answer.headers["x-kiban-revision"] == "v2"
            table.remove("team", "svc")
            assert client.get(url).status_code == 404
    finally:
        a.stop()
        b.stop()


def test_concurrent_clients_all_get_their_own_answers(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), ready(replicas[1])))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    failures: list[str] = []

    def client(n: int) -> None:
        with httpx.Client() as c:
            for i in range(20):
                answer = c.post(url, content=f"{n}-{i}".encode())
                if answer.json()["body"] != f"{n}-{i}":
                    failures.append(answer.text)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert replicas[0].requests + replicas[1].requests == 160


def test_a_client_that_leaves_mid_request_frees_its_replica(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    replica = replicas[0]
    table.set(route(ready(replica), max_concurrency_per_endpoint=1))
    with raw_connection(router.port) as sock:
        sock.sendall(b"GET /s/team/svc/v2/echo?ms=3000 HTTP/1.1\r\nhost: x\r\n\r\n")
        eventually(lambda: replica.in_flight > 0, what="the request at its replica")
    # the replica's slot is free again: the next request is not queued behind the dead one
    started = time.perf_counter()
    assert httpx.get(f"{router.url_for('team', 'svc')}/v2/echo", timeout=10).status_code == 200
    assert time.perf_counter() - started < 1.5
    snap = router.metrics.snapshot("team", "svc")
    assert snap.in_flight == 0 and snap.errors == 1


def test_a_request_body_is_forwarded_as_it_arrives(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    replica = replicas[0]
    table.set(route(ready(replica)))

    def body():  # type: ignore[no-untyped-def]
        yield b"first "
        # the replica has the first chunk before the client sends the second
        assert replica.first_chunk.wait(5)
        yield b"second"

    answer = httpx.post(f"{router.url_for('team', 'svc')}/v2/echo", content=body(), timeout=10)
    assert answer.json()["body"] == "first second"


def test_a_big_answer_to_a_slow_reader_arrives_whole(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    """The router's pausing of the replica (flow control) loses and reorders nothing."""
    table.set(route(ready(replicas[0])))
    received = 0
    with httpx.stream("GET", f"{router.url_for('team', 'svc')}/v2/big?mb=16", timeout=10) as a:
        for n, chunk in enumerate(a.iter_raw()):
            received += len(chunk)
            if n < 5:
                time.sleep(0.05)
    assert received == 16 << 20
    with httpx.Client() as client:  # the connection to the replica is fine for the next one
        assert client.get(f"{router.url_for('team', 'svc')}/v2/echo").status_code == 200


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"http/1.1 200 ok\r\ncontent-length: 12", (12, True)),
        (b"http/1.1 200 ok\r\ncontent-length: 3\r\nconnection: close", (3, False)),
        (b"http/1.1 304 not modified\r\ncontent-length: 99", (0, True)),
        (b"http/1.1 200 ok\r\ntransfer-encoding: chunked", None),
        (b"http/1.1 200 ok\r\ncontent-type: text/plain", None),
        (b"http/1.0 200 ok\r\ncontent-length: 12", None),
        (b"http/1.1 100 continue", None),
        (b"http/1.1 200 ok\r\nconnection: keep-alive\r\ncontent-length: 5", (5, True)),
        (b"http/1.1 200 ok\r\nconnection: close", None),
        (b"http/1.1 204 no content\r\nconnection: close", (0, False)),
        (b"http/1.1 200 ok\r\ncontent-length: x\r\nserver: s", None),
        (b"http/1.1 200 ok\r\ncontent-length: 7\r\ntransfer-encoding: chunked", None),
    ],
)
def test_how_the_end_of_an_answer_is_found(head: bytes, expected: object) -> None:
    assert _content_length(head) == expected


def test_expect_100_continue_is_answered_by_the_router(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    with raw_connection(router.port) as sock:
        sock.sendall(
            b"POST /s/team/svc/v2/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
            b"expect: 100-continue\r\n\r\n"
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"hello")
        data = b""
        while b'"body": "hello"' not in data:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
    assert b"expect" not in data  # not forwarded to the replica


def test_a_failing_authorize_refuses_and_names_are_percent_decoded(
    table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    def authorize(tenant: str, token: str) -> bool:
        if token == "boom":
            raise RuntimeError("token store down")
        return tenant == "team a" and token == TOKEN

    table.set(Route("team a", "svc/1", {"v1": 100}, (ready(replicas[0]),)))
    with RouterServer(table, authorize=authorize) as server, httpx.Client() as client:
        url = f"{server.url_for('team a', 'svc/1')}/v2/echo"
        assert "team%20a/svc%2F1" in url
        assert client.get(url, headers={"authorization": "Bearer boom"}).status_code == 401
        good = client.get(url, headers={"authorization": f"Bearer {TOKEN}"})
        assert good.status_code == 200
