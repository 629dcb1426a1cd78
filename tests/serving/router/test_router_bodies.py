"""Request bodies over the router's buffer (1 MiB) pass whole: with a replica ready, when a new
connection to it must be opened first, and after a wait in the queue; many times, since
whether a body outruns the connection depends on timing."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

import httpx
import pytest
from router_support import FakeReplica, in_background, ready, route

from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import Endpoint, RoutingTable

TWO_MB = 2_000_000
TRIES = 20


def body(n: int) -> bytes:
    """A 2 MB body that differs per try (so a mix-up of two bodies shows)."""
    seed = hashlib.sha256(str(n).encode()).hexdigest().encode()
    return (seed * (TWO_MB // len(seed) + 1))[:TWO_MB]


@pytest.fixture
def closing_replica() -> Iterator[FakeReplica]:
    """A replica that closes its connection after each answer: every request through the
    router then opens a new connection to it (nothing is pooled), the case that hung."""
    replica = FakeReplica("closing", close_after_answer=True)
    yield replica
    replica.stop()


def post(client: httpx.Client, url: str, n: int) -> httpx.Response:
    return client.post(f"{url}/v2/digest", content=body(n), timeout=httpx.Timeout(15.0))


def post_alone(url: str, n: int) -> httpx.Response:
    with httpx.Client() as client:
        return post(client, url, n)


def expect_whole(answer: httpx.Response, n: int) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"size": TWO_MB, "sha256": hashlib.sha256(body(n)).hexdigest()}


def test_2mb_bodies_pass_on_new_connections_to_the_replica(
    router: RouterServer, table: RoutingTable, closing_replica: FakeReplica
) -> None:
    table.set(route(ready(closing_replica)))
    url = router.url_for("team", "svc")
    for n in range(TRIES):
        expect_whole(post_alone(url, n), n)  # a new client connection each time as well
    assert closing_replica.requests == TRIES


def test_2mb_bodies_pass_on_a_kept_alive_connection(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0])))
    url = router.url_for("team", "svc")
    with httpx.Client() as client:
        for n in range(TRIES):
            expect_whole(post(client, url, n), n)


def test_2mb_bodies_pass_from_concurrent_clients(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), ready(replicas[1])))
    url = router.url_for("team", "svc")
    failures: list[str] = []

    def client(k: int) -> None:
        with httpx.Client() as c:
            for i in range(4):
                n = 100 * k + i
                try:
                    expect_whole(post(c, url, n), n)
                except (AssertionError, httpx.HTTPError) as exc:
                    failures.append(f"{n}: {exc!r}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_2mb_bodies_pass_after_waiting_in_the_queue(
    router: RouterServer, table: RoutingTable, closing_replica: FakeReplica
) -> None:
    """No replica is ready when each request comes: it waits (its body held, the client paused
    at the buffer's limit) until one is, then goes to it on a new connection."""
    not_ready = Endpoint("v1", closing_replica.address, False)
    url = router.url_for("team", "svc")
    for n in range(TRIES // 4):
        table.set(route(not_ready, activation_timeout_s=30))
        thread, out = in_background(lambda n=n: post_alone(url, n))  # type: ignore[misc]
        waiting = threading.Event()
        for _ in range(1000):  # poll until the request waits in the queue
            if router.metrics.snapshot("team", "svc").queued == 1:
                break
            waiting.wait(0.01)
        assert router.metrics.snapshot("team", "svc").queued == 1
        table.set(route(ready(closing_replica), activation_timeout_s=30))
        thread.join(20)
        assert out, "the request hung"
        expect_whole(out[0], n)
